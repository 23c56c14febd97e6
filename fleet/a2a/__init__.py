"""The A2A protocol's messages built from fleet's values, shared by the API and delivery."""
