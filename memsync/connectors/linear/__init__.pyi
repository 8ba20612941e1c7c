from .connector import IssueRef as IssueRef
from .connector import LinearComment as LinearComment
from .connector import LinearConnector as LinearConnector
from .connector import LinearIssue as LinearIssue
from .connector import LinearRecord as LinearRecord
from .declaration import LINEAR as LINEAR
from .declaration import LinearConfig as LinearConfig
