from .connector import COMMENTS_QUERY as COMMENTS_QUERY
from .connector import ISSUES_QUERY as ISSUES_QUERY
from .connector import LINEAR_SOURCE as LINEAR_SOURCE
from .connector import LinearConnector as LinearConnector
from .declaration import LINEAR as LINEAR
from .declaration import LinearConfig as LinearConfig
