from .declaration import ZENDESK as ZENDESK
from .declaration import ZendeskConfig as ZendeskConfig
from .zendesk import TicketRef as TicketRef
from .zendesk import ZendeskComment as ZendeskComment
from .zendesk import ZendeskConnector as ZendeskConnector
from .zendesk import ZendeskRecord as ZendeskRecord
from .zendesk import ZendeskStatusChange as ZendeskStatusChange
from .zendesk import ZendeskTicket as ZendeskTicket
