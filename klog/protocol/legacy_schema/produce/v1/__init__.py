from .request import ProduceRequest
from .response import ProduceResponse

__all__ = (
    "ProduceRequest",
    "ProduceResponse",
)
