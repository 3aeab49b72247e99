"""An example hpcdispatch plugin: the `sjf-backfill` dispatcher and the `user-longest` predictor."""
