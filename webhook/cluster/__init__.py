"""Everything that talks to a live cluster: the cluster view (list and watch of nodes, DRA objects
and namespaces, handed to the policy as immutable snapshots), the cluster's version (/version),
`audit` (judging what runs) and `verify` (probe pods that prove scheduling and isolation).
"""
