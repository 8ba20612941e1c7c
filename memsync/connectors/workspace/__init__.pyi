from .connector import WorkspaceConnector as WorkspaceConnector
from .connector import WorkspaceFile as WorkspaceFile
from .connector import WorkspaceRecord as WorkspaceRecord
from .connector import WorkspaceSnapshot as WorkspaceSnapshot
from .connector import display_name as display_name
from .connector import snapshot_digest as snapshot_digest
from .declaration import WORKSPACE as WORKSPACE
from .declaration import WorkspaceConfig as WorkspaceConfig
