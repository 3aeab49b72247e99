"""Duration predictors and their knowledge base (server/predictors/)."""
