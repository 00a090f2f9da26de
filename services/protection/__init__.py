"""Data protection: snapshot schedules, replication to a peer appliance, backup to S3,
bucket snapshots and bucket replication. See README.md for the REST resources, the
replication wire protocol and what each module does."""
