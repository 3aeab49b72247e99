"""The repository as a whole: docs, packaging, Dockerfile, deploy/, rooms and imports, the suite."""
