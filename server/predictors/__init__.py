"""Duration predictors d_i (DESIGN.md §5), one module each behind `base.DurationPredictor`,
reading the completed jobs of one shared knowledge base (`knowledge_base`)."""
