"""The stored format, pure: serialization policy, byte codecs, cutting values into pieces,
manifests and their trees, sealing under keys, values to row text and back.
Imports only d1saver.core."""
