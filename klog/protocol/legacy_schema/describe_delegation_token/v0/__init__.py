from .request import DescribeDelegationTokenRequest
from .response import DescribeDelegationTokenResponse

__all__ = (
    "DescribeDelegationTokenRequest",
    "DescribeDelegationTokenResponse",
)
