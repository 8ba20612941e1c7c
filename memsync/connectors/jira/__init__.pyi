from .connector import IssueRef as IssueRef
from .connector import JiraComment as JiraComment
from .connector import JiraConnector as JiraConnector
from .connector import JiraIssue as JiraIssue
from .connector import JiraRecord as JiraRecord
from .declaration import JIRA as JIRA
from .declaration import JiraConfig as JiraConfig
