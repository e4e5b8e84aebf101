"""What a tenant may use: fairness limits on runs and invokes, the environment it may read."""
