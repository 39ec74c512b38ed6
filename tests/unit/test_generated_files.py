"""Files generated from the code are not stale: the chart's config admission policies
(hack/gen_config_policy.py) and deploy/config-policy.yaml rendered from them. The protobuf
modules are checked in test_proto.py."""

from __future__ import annotations

from dradriver import admission
from dradriver.contract.config import ConfigSchema
from tests.deploy.support import (
    DEPLOY,
    as_installed,
    by_name,
    docs,
    gen_config_policy,
    generated_objects,
)
from tests.support import thirdparty

POLICY = DEPLOY / "config-policy.yaml"


def test_the_chart_template_is_the_generators_output():
    """A handler's schema change fails here until `make config-policy` regenerates it."""
    gcp = gen_config_policy()
    objects, warnings = gcp.placeholder_objects()
    assert warnings == "", "the built-in handlers' schema must translate fully"
    diff = gcp.difference(gcp.template(objects), gcp.TEMPLATE.read_text())
    assert not diff, f"the chart's config-policy template is stale: run make config-policy\n{diff}"


def test_a_schema_change_makes_the_template_stale():
    """The check above can fail: a third-party kind gives another template."""
    gcp = gen_config_policy()

    def with_fpga(driver: str) -> tuple[str, str]:
        built = admission.build(ConfigSchema(thirdparty.registry(), driver), driver)
        return admission.render(built, admission.header(driver)), ""

    objects, _ = gcp.placeholder_objects(with_fpga)
    diff = gcp.difference(gcp.template(objects), gcp.TEMPLATE.read_text())
    assert "'bitstream'" in diff, diff[:2000]


def test_the_file_holds_the_generators_policies():
    """deploy/config-policy.yaml, rendered from the chart, is the generator's output for
    dra.example.com object for object (with the chart's labels)."""
    labels = {"app.kubernetes.io/name": "dra-driver", "app.kubernetes.io/instance": "dra-driver"}
    assert by_name(docs(POLICY)) == as_installed(generated_objects(), labels)
