"""Strata management plane: Django project, auth and roles, audit, jobs, the `strata` command."""
