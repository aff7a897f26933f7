"""Server-level reliability: bad input, load, crashes, access control and hostile content."""
