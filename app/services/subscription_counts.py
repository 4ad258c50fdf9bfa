"""Subscription totals read from `subscription_counts`, which database triggers keep in the same transaction
as the rows (migration a7d3f1c9e215): exact at any size without counting rows."""
from sqlalchemy import bindparam, func, select

from app.models import SubscriptionCount


def total_statement(by_entity_type=False, by_status=False, statuses=None, entity_types=None):
    """The total of the account in the parameter `account_id`, of the parameters `entity_type` and `status`
    when asked, or of fixed tuples of `statuses` and `entity_types`."""
    conditions = [SubscriptionCount.account_id == bindparam("account_id")]
    if by_entity_type:
        conditions.append(SubscriptionCount.entity_type == bindparam("entity_type"))
    if by_status:
        conditions.append(SubscriptionCount.status == bindparam("status"))
    if statuses is not None:
        conditions.append(SubscriptionCount.status.in_(statuses))
    if entity_types is not None:
        conditions.append(SubscriptionCount.entity_type.in_(entity_types))
    return select(func.coalesce(func.sum(SubscriptionCount.count), 0)).where(*conditions)


def by_status(session, account_id=None) -> dict:
    """{status: count} of one account, or of every account."""
    query = select(SubscriptionCount.status, func.sum(SubscriptionCount.count)).group_by(SubscriptionCount.status)
    if account_id is not None:
        query = query.where(SubscriptionCount.account_id == account_id)
    return {status: int(count) for status, count in session.execute(query).all()}
