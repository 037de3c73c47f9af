"""Consumer-group administration as methods of a store, local (Store) or a cluster's (RemoteStore):
the CLI calls these; klog.client.groups_admin holds the one implementation (it dispatches to the
cluster's admin APIs for a RemoteStore). Imports are lazy: opening a store stays cheap."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from klog.client.groups_admin import GroupDescription, GroupListing, MemberInfo, ResetRow, ResetSpec
    from klog.meta.groups import TP, ExpiredOffsets


class GroupAdminMethods:
    """list/describe/reset/delete of consumer groups (like kafka-consumer-groups); none prints."""

    def list_groups(self) -> list[GroupListing]:
        from klog.client.groups_admin import list_groups

        return list_groups(self)

    def describe_group(self, group: str) -> GroupDescription:
        """Per partition: committed offset, log start and end, lag, and the member reading it."""
        from klog.client.groups_admin import describe_group

        return describe_group(self, group)

    def group_members(self, group: str) -> list[MemberInfo]:
        """The group's live members (none for an unknown group)."""
        from klog.client.groups_admin import live_members

        return live_members(self, group)

    def plan_offset_reset(self, group: str, spec: ResetSpec, scopes: Iterable[str] = (),
                          all_topics: bool = False) -> list[ResetRow]:
        """Where each committed offset of `scopes` (TOPIC or TOPIC:P,...) would go; nothing changes."""
        from klog.client.groups_admin import plan_reset

        return plan_reset(self, group, spec, list(scopes), all_topics)

    def reset_group_offsets(self, group: str, plan: list[ResetRow]) -> None:
        """Apply a plan of plan_offset_reset; refused (GroupError) while the group has live members."""
        from klog.client.groups_admin import execute_reset

        execute_reset(self, group, plan)

    def delete_group(self, group: str) -> int:
        """Delete a group without live members; returns the number of committed offsets deleted."""
        from klog.client.groups_admin import delete_group

        return delete_group(self, group)

    def delete_group_offsets(self, group: str, scope: str) -> list[TP]:
        """Delete the group's committed offsets of TOPIC or TOPIC:P,...; returns the partitions."""
        from klog.client.groups_admin import delete_offsets

        return delete_offsets(self, group, scope)

    def expire_group_offsets(self) -> list[ExpiredOffsets]:
        """Expire committed offsets past offsets.retention.minutes now (Kafka's rule, KIP-211)."""
        from klog.client.groups_admin import expire_offsets

        return expire_offsets(self)
