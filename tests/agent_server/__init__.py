"""d1saver.agent_server: the factories alone, and LangGraph's Agent Server running them."""
