"""Journal intake: runs, branches, records and turns as stored."""
