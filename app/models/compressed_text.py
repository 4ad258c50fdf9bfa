"""Event bodies stored zlib-compressed, with a preset dictionary of what every envelope repeats.

A body is a few hundred bytes of JSON (an initial state a few kilobytes) whose keys, event types and URL
prefixes recur in every row: zlib alone cannot use that across rows, a preset dictionary can (README, Disk:
what it saves). Read back, a body is the exact text written, so every delivery still sends (and signs) the
same bytes."""
import zlib

from sqlalchemy import LargeBinary
from sqlalchemy.types import TypeDecorator

# Built from the contract's shapes only (§6 envelopes, §7 snapshots): keys, event types, fixed values, the URL
# prefixes of the default NETWORK_DOMAIN; the most frequent last (nearer is cheaper). Never edit it: every stored
# body needs it to be read (zlib records its checksum, so a changed one fails loudly instead of misreading).
BODY_DICTIONARY = (
    b'"reaction_type":null,"target_url":null,"headcount":,"industry":"","website":"https://'
    b'"reason":"private""reason":"not_found""kind":"comment""kind":"reaction"'
    b'"previous_employee_count":,"current_employee_count":,"delta":,"delta_percent":'
    b'"changes":{"previous_description":"","current_description":""}'
    b'"changes":{"previous_headline":"","current_headline":""}'
    b'"changes":{"previous_company":"","previous_title":"","current_company":"","current_title":""}'
    b'"type":"subscription.initial_state""type":"entity.unavailable""type":"company.employee_count_changed"'
    b'"type":"company.description_changed""type":"contact.headline_changed""type":"contact.position_changed"'
    b'"type":"contact.comment_created""type":"contact.reaction_added""type":"company.post_created"'
    b'"state":{"network_id":"","name":"","headline":"","company":"","title":"","location":"","activities":['
    b'"activity":{"id":"","kind":"post","url":"https://www.linkedin.com/feed/update/","text":"",'
    b'"created_at":"T00:00:00Z"'
    b'"type":"company","network_id":"","network_url":"https://www.linkedin.com/company/"},'
    b'{"id":"evt_","type":"contact.post_created","created":,"data":{"entity":{"id":"sub_",'
    b'"type":"contact","network_id":"","network_url":"https://www.linkedin.com/in/"},'
    b'"metadata":{"subscription_id":"sub_","detected_at":"T00:00:00.000Z","custom_metadata":{}}}')


def compress(text: str) -> bytes:
    compressor = zlib.compressobj(zdict=BODY_DICTIONARY)
    return compressor.compress(text.encode()) + compressor.flush()


def decompress(stored: bytes) -> str:
    decompressor = zlib.decompressobj(zdict=BODY_DICTIONARY)
    return (decompressor.decompress(stored) + decompressor.flush()).decode()


class CompressedText(TypeDecorator):
    """A text column stored as `compress`ed bytes: written and read as str."""
    impl = LargeBinary
    cache_ok = True

    def process_bind_param(self, value, dialect):
        return None if value is None else compress(value)

    def process_result_value(self, value, dialect):
        return None if value is None else decompress(bytes(value))
