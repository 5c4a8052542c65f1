"""How trials run on Ray: the broker between driver and workers, lanes, and the worker loop.

Mirrors Ray Train V2's ``_internal/execution``: one module per concern, policies as small objects.
"""
