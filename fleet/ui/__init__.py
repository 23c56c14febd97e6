"""The operator UI's templates and static files (served by ``fleet.api.ui``)."""
