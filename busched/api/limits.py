"""The bounds every object spec is held to, in one place.

Kubernetes and Volcano refuse these at admission; busched has no API server in front of it, so
the spec types (`busched.api.objects`, `busched.api.k8s_specs`) carry them as msgspec
constraints (checked while a message or file decodes, before anything else sees it), and
`Resource.from_list` and `busched.api.build.validate` check what a type cannot say (a
quantity's parsed value, the total size of the annotations).

================================  ==================================================================
quantities (cpu)                  0 .. 10^7 cores (10^10 milli-cpu)
quantities (memory, every other)  0 .. 2^62 in base units (bytes, pods, devices)
quantity text                     at most 64 characters, exponent at most 10^+-64
priority, priorityClass value     int32
minMember, minTaskMember          0 .. int32 max
queue weight                      0 .. int32 max (Volcano's webhook wants >= 1, but its own
                                  test cases, transcribed in tests/scenarios, use 0)
hyperNode tier, highestTier...    0 .. int32 max
hostPorts                         0 .. 65535
topology spread maxSkew           1 .. int32 max; minDomains 1 .. int32 max
affinity / preferred weights      0 .. 100 (Kubernetes: 1 .. 100; a 0 is skipped)
label key / value                 317 (253 prefix + "/" + 63 name) / 63 characters
node name                         253 characters (Kubernetes: a DNS subdomain; a node ledger names its node)
nodeShard name                    253 characters (a sharded scheduler's records and ledgers name it)
labels, selectors' matchLabels    at most 256 entries
annotations                       keys 317 characters, 256 KiB in all (keys and values)
lists (tolerations, taints,       at most 1,024 items
terms, expressions, values, ...)
hyperNode members                 at most 100,000
hyperNode member regexMatch       a pattern of at most 256 characters, RE2 syntax (Go's regexp: no
                                  backreferences, matched in time linear in the name)
other strings in k8s shapes       at most 1,024 characters (a condition's message 32 KiB)
task command, args                at most 1,024 items of 1,024 characters each
task env                          at most 1,024 entries; names 1 .. 1,024 characters of letters,
                                  digits, ``_``, ``-``, ``.`` not starting with a digit (Kubernetes'
                                  C_IDENTIFIER, relaxed as it is since 1.x); values 32 KiB
task workingDir, image            at most 1,024 characters
numaTopology                      cpu ids 0 .. 16,383 (at most 16,384 cpus in cpuDetail, cpusets and
                                  podAllocations); NUMA node ids 0 .. 63 (the topology manager's
                                  64-bit masks), at most 8 of them on a node (the kubelet topology
                                  manager's default maxAllowableNUMANodes; every set of them is
                                  tried); a cpuset list 32 KiB
================================  ==================================================================

Nesting needs no bound of its own: every spec field is typed, so a message nests no deeper than
its types, and anything deeper fails to decode at the first level the types do not allow.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

__all__ = ["MAX_MILLI_CPU", "MAX_SCALAR", "MAX_QUANTITY_TEXT", "MAX_EXPONENT", "INT32_MIN", "INT32_MAX",
           "MAX_LABELS", "MAX_ITEMS", "MAX_MEMBERS", "MAX_PATTERN", "MAX_ANNOTATIONS_BYTES", "MAX_LABEL_KEY",
           "MAX_LABEL_VALUE", "MAX_NODE_NAME", "MAX_SHARD_NAME", "MAX_STRING", "MAX_MESSAGE", "MAX_CPUS", "MAX_NUMA_ID",
           "MAX_NUMA_NODES", "EnvName", "CommandText", "Int32", "NonNegInt32", "PosInt32", "Port",
           "LabelKey", "LabelValue", "Labels", "Annotations", "ShortStr", "Strings", "QuantityText", "Size"]

MAX_MILLI_CPU = 10**7 * 1000
MAX_SCALAR = 2**62
MAX_QUANTITY_TEXT = 64
MAX_EXPONENT = 64
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
MAX_LABELS = 256
MAX_ITEMS = 1024
MAX_MEMBERS = 100_000
MAX_PATTERN = 256
MAX_ANNOTATIONS_BYTES = 256 * 1024
MAX_LABEL_KEY = 253 + 1 + 63
MAX_NODE_NAME = 253
MAX_SHARD_NAME = 253
MAX_LABEL_VALUE = 63
MAX_STRING = 1024
MAX_MESSAGE = 32 * 1024
MAX_CPUS = 16384
MAX_NUMA_ID = 63
MAX_NUMA_NODES = 8

Int32 = Annotated[int, msgspec.Meta(ge=INT32_MIN, le=INT32_MAX)]
NonNegInt32 = Annotated[int, msgspec.Meta(ge=0, le=INT32_MAX)]
PosInt32 = Annotated[int, msgspec.Meta(ge=1, le=INT32_MAX)]
Port = Annotated[int, msgspec.Meta(ge=0, le=65535)]
Size = Annotated[int, msgspec.Meta(ge=0, le=MAX_SCALAR)]
LabelKey = Annotated[str, msgspec.Meta(max_length=MAX_LABEL_KEY)]
LabelValue = Annotated[str, msgspec.Meta(max_length=MAX_LABEL_VALUE)]
ShortStr = Annotated[str, msgspec.Meta(max_length=MAX_STRING)]
QuantityText = Annotated[str, msgspec.Meta(max_length=MAX_QUANTITY_TEXT)]
Labels = Annotated[dict[LabelKey, LabelValue], msgspec.Meta(max_length=MAX_LABELS)]
# (the total size, 256 KiB, is checked by `busched.api.build.validate`)
Annotations = Annotated[dict[LabelKey, str], msgspec.Meta(max_length=MAX_ITEMS)]
Strings = Annotated[list[ShortStr], msgspec.Meta(max_length=MAX_ITEMS)]
EnvName = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_STRING, pattern=r"^[A-Za-z_.-][A-Za-z0-9_.-]*$")]
CommandText = Annotated[str, msgspec.Meta(max_length=MAX_MESSAGE)]
