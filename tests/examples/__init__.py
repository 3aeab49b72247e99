"""The examples (examples/): the example plugin package end to end."""
