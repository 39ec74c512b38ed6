"""ValidatingAdmissionPolicies that refuse bad opaque configs at apply time, built from the
assembled config schema (pure: no I/O; `dra-driver admission-policy` prints them).

Two policies, because a config is a fragment the driver merges with others (class
configs first, then the claim's, later fields winning; docs/deployment.md, "Opaque config at
admission"):

* `<driver>-opaque-config` (admission/fragment.py) checks each config of ours on its own
  in ResourceClaims, ResourceClaimTemplates and DeviceClasses;
* `<driver>-opaque-config-merged` (admission/merged.py) checks each request of a claim
  (template) merged with the configs of its DeviceClass, taken as a parameter.

Both fail open (failurePolicy Ignore): the driver checks everything again at prepare.
"""

from __future__ import annotations

from dradriver.admission.policies import Generated, build, header, render

__all__ = ["Generated", "build", "header", "render"]
