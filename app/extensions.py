"""Extensions, created once and bound to the app in `create_app`."""
from flask import g, request
from flask_limiter import Limiter
from flask_migrate import Migrate
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import MetaData
from sqlalchemy.orm import DeclarativeBase

from app import rate_limit_storage  # noqa: F401 - memory:// without a thread per request

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


db = SQLAlchemy(model_class=Base, session_options={"expire_on_commit": False})
migrate = Migrate(render_as_batch=True)


def rate_limit_key():
    """The validated API key id; the client address for requests without a valid key."""
    key_id = g.get("api_key_id")
    return f"key:{key_id}" if key_id else f"addr:{request.remote_addr}"


limiter = Limiter(key_func=rate_limit_key, headers_enabled=False)
