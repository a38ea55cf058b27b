"""The domain model: Kueue Workloads (workload), their owners (owners), tenants (tenancy)."""
