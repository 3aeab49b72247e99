"""Duration predictors d_i (DESIGN.md §5), one module each behind `base.DurationPredictor`."""
