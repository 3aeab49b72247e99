"""The one door into the core (server/pipeline.py): predict, dispatch, check, fallback."""
