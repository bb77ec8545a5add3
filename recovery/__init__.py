"""Recovery: the pure engine, assessments, packages and the recovery gate."""
