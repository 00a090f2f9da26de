"""Strata's Kubernetes CSI driver (CSI spec v1.10): Identity, Controller and Node services over
gRPC. A client of the plane's REST API only (plumbing.restclient): no Django, so it runs on a
Kubernetes node or in a controller pod without the plane's code paths. See README.md."""
