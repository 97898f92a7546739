"""Manifests in, reports out: what `gpu-policy check` and `mutate` read (YAML and JSON files, each
field's line kept) and what they print (text, JSON, JUnit, SARIF). No server, no cluster.
"""
