"""A module a helper target imports only when it runs (as inductor's passes pull in dynamo)."""

LOADED = True
