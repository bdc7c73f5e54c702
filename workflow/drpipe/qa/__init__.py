"""Open-domain QA data: dataset loaders into one question table, and answer matching."""
