"""ticket-fleet: workers that open help desk tickets under a shared quota (fence's worked example)."""
