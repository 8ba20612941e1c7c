from .connector import CONTENTLESS_SUBTYPES as CONTENTLESS_SUBTYPES
from .connector import SlackConnector as SlackConnector
from .connector import SlackMessage as SlackMessage
from .connector import slack_ts_to_datetime as slack_ts_to_datetime
from .declaration import SLACK as SLACK
from .declaration import SlackConfig as SlackConfig
