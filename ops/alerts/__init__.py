"""The alert bridge: incidents to Alertmanager, PagerDuty and webhooks, at least once, never lost."""
