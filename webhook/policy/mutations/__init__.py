"""One module per mutation; each returns JSONPatch operations built from the few fields it touches.

No whole-object diff: a mutation knows exactly which field it adds or changes, so it writes
that operation directly (a diff of the whole pod costs hundreds of microseconds).
"""
