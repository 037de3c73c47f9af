from .request import CreateDelegationTokenRequest
from .response import CreateDelegationTokenResponse

__all__ = (
    "CreateDelegationTokenRequest",
    "CreateDelegationTokenResponse",
)
