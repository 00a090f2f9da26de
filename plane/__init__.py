"""The management plane's kernel, which every service builds on: jobs with progress, the audit
log, roles, the API's error handler, service discovery, and the building blocks of the API,
the console pages and the CLI. It imports no service: `console/` (the project on top) and the
services find each other through `plane.discovery`."""
