from .request import RenewDelegationTokenRequest
from .response import RenewDelegationTokenResponse

__all__ = (
    "RenewDelegationTokenRequest",
    "RenewDelegationTokenResponse",
)
