"""How trials run on Ray: connecting to the cluster, the broker between driver and workers,
lanes (one Ray Train `fit()` each, hosted by a lane host), the lane pool, and the loop every
worker of a lane runs.

Mirrors Ray Train V2's ``_internal/execution``: one module per concern, policies as small objects.
`raytrain` is the one module with Ray Train's private names.

Owns: `cluster`, `images`, `broker`, `host`, `lane`, `lane_worker`, `pool`, `raytrain`, `storage`,
`placement` (what a lane not placed waits for), `startcost` (whether a lane's start pays).
May import: every layer below: `common`, `spec`, `contracts`, `worker`, `trainer`,
`tracking`, `search`, `service`.
"""
