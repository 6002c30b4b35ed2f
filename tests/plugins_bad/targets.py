"""Targets that are not well formed: ``fence targets --target`` refuses each in one line."""

from fence.targets import Target

STORAGE_WITHOUT_ATTRIBUTE = Target(row="no-attribute", system="redis", policy="naive", storage="mypkg.queue",
                                   server="redis")
NO_SERVER = Target(row="no-server", system="redis", policy="naive", storage="mypkg.queue:Storage")
UNKNOWN_SERVER = Target(row="mongo", system="pymongo", policy="naive", storage="mypkg.queue:Storage", server="mongodb")
ZERO_TICK = Target(row="zero-tick", system="redis", policy="naive", storage="mypkg.queue:Storage", server="redis",
                   tick_seconds=0)
SAME_ROW_AS_THE_DESK = Target(row="forgetful-desk", system="redis", policy="naive", storage="mypkg.queue:Storage",
                              server="redis")
STORAGE_NOT_INSTALLED = Target(row="not-installed", system="nothing", policy="naive",
                               storage="no_such_queue_library_xyz:Storage", server="redis")
