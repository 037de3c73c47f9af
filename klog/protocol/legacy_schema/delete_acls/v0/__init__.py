from .request import DeleteAclsRequest
from .response import DeleteAclsResponse

__all__ = (
    "DeleteAclsRequest",
    "DeleteAclsResponse",
)
