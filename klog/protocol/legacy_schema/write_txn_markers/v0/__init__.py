from .request import WriteTxnMarkersRequest
from .response import WriteTxnMarkersResponse

__all__ = (
    "WriteTxnMarkersRequest",
    "WriteTxnMarkersResponse",
)
