"""An endpoint that answers JSON nested 200,000 deep is a clear `EndpointError`, never an
internal RecursionError (issue 15, item 13)."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

from dflash_guard.lossless.endpoint import EndpointError
from dflash_guard.lossless.endpoint.client import CompletionClient
from tests.support.endpoint_fakes import serve

DEPTH = 200_000


async def deep_models(request) -> Response:
    return Response("[" * DEPTH + "]" * DEPTH, media_type="application/json")


def test_json_nested_200k_deep_is_an_endpoint_error():
    app = Starlette(routes=[Route("/v1/models", deep_models)])
    with serve(app) as url, CompletionClient("candidate", url, retries=0) as client, \
            pytest.raises(EndpointError, match="nested too deeply"):
        client.first_model()
