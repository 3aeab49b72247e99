"""The command line (hpcdispatch/cli.py) as users and operators run it."""
