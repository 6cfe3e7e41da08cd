"""Pictures and summaries from sweep result tables (``specplan report``)."""
