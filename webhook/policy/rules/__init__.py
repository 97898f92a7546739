"""One module per validating rule; `webhook.policy.registry` lists them in message order."""
