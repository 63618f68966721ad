"""A gap of moto's CloudFormation that the stack's template needs filled: a REST API made from its `Body`.

API Gateway builds a REST API's resources and methods from the Swagger 2.0 `Body` Chalice generates
(`infra/aws/template_app.py`); moto's CloudFormation makes the REST API without them (and moto's own import
takes OpenAPI 3 only), so the stack's `AWS::ApiGateway::Deployment` fails there with "The REST API
doesn't contain any methods". `patch_rest_api_body()` makes moto build them: every path's resources, every
method with its authorization (AWS_IAM where the body asks for SigV4) and its Lambda proxy integration.

It also makes moto keep a resource of `DeletionPolicy: Retain` that an update leaves out of the template,
as CloudFormation does (moto deletes it): `det deploy aws up` relies on it when an older stack's tables
leave the stack (`det/deploy/aws.py`).
"""

from __future__ import annotations

from typing import Any

_patched = False


def _resource(backend: Any, api: Any, path: str) -> Any:
    """The resource of `path`, its ancestors made on the way."""
    parent = api.get_resource_for_path("/")
    built = ""
    for part in [p for p in path.split("/") if p]:
        built += "/" + part
        found = api.get_resource_for_path(built)
        parent = found or backend.create_resource(
            function_id=api.id, parent_resource_id=parent.id, path_part=part
        )
    return parent


def build_from_body(backend: Any, api: Any, body: dict[str, Any]) -> int:
    """The body's methods made on `api`; how many."""
    made = 0
    for path, operations in sorted(body.get("paths", {}).items()):
        resource = _resource(backend, api, path)
        for method, spec in operations.items():
            if method.startswith("x-") or not isinstance(spec, dict):
                continue
            backend.put_method(
                api.id, resource.id, method.upper(), "AWS_IAM" if spec.get("security") else "NONE"
            )
            integration = spec.get("x-amazon-apigateway-integration") or {}
            backend.put_integration(
                api.id,
                resource.id,
                method.upper(),
                integration_type=str(integration.get("type", "aws_proxy")).upper(),
                uri=str(integration.get("uri", "")),
                integration_method=str(integration.get("httpMethod", "POST")),
            )
            made += 1
    return made


def patch_rest_api_body() -> None:
    """Make moto's CloudFormation build a REST API's `Body` (once per process)."""
    global _patched
    if _patched:
        return
    from moto.apigateway import models

    original = models.RestAPI.create_from_cloudformation_json.__func__  # type: ignore[attr-defined]

    def create(cls: Any, /, resource_name: str, cloudformation_json: dict[str, Any], account_id: str,
               region_name: str, **kwargs: Any) -> Any:  # fmt: skip
        api = original(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs)
        body = cloudformation_json.get("Properties", {}).get("Body")
        if isinstance(body, dict):
            build_from_body(models.apigateway_backends[account_id][region_name], api, body)
        return api

    setattr(models.RestAPI, "create_from_cloudformation_json", classmethod(create))  # noqa: B010
    _keep_retained_on_update()
    _patched = True


def _keep_retained_on_update() -> None:
    from moto.cloudformation import parsing

    delete = parsing.ResourceMap._delete_resource

    def delete_unless_retained(self: Any, parsed_resource: Any, resource_json: dict[str, Any]) -> None:
        if resource_json.get("DeletionPolicy") == "Retain":
            return  # left in place, no longer the stack's
        delete(self, parsed_resource, resource_json)

    setattr(parsing.ResourceMap, "_delete_resource", delete_unless_retained)  # noqa: B010
