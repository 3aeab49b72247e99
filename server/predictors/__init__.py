"""Duration predictors d_i (wall time, last two, data driven, oracle), one module each behind
the domain's `duration_predictor.DurationPredictor`, reading the completed jobs of one shared
knowledge base."""
