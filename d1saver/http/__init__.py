"""Moving bytes: the D1 REST client, its envelope and error mapping, retry policy, group commit,
and the sync/async driver that runs operations. Imports only d1saver.core."""
