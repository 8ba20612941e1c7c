from __future__ import annotations

from memsync.connectors import ConnectorDeclaration, KeyPolicy, http


class DeskConfig(http.TokenConfig):  # token: ${DESK_TOKEN}, sent as a bearer token
    account: str


NOTES = http.HttpStream(
    name="notes",
    path="/v1/tickets/{parent[id]}/notes",
    key="{config.account}:ticket:{parent[id]}:note:{id}",
    occurred_at="created_at",
    pagination=http.NextUrl("next"),
    on_not_found=http.NotFound.PARENT_GONE,  # a ticket deleted: it and its notes are gone
)
TICKETS = http.HttpStream(
    name="tickets",
    path="/v1/tickets?sort=updated_at",
    key="{config.account}:ticket:{id}",
    incremental=http.Incremental(field="updated_at", param="updated_since"),
    pagination=http.LinkHeader(),
    children=(NOTES,),
    absent_from_full_read="{config.account}:",  # a backfill sees deleted tickets
    ordered=True,  # sorted by updated_at: the runner may checkpoint after every batch
)
DESK = ConnectorDeclaration(
    type="desk",
    key_policy=KeyPolicy.IDENTITY,
    key_rationale="Tickets and notes have ids Desk never reuses; keys use ids only.",
    config_model=DeskConfig,
    example_key="desk:acme:ticket:7:note:3",
    implementation="memsync.connectors.http.example:DeskConnector",
    deletions="A ticket absent from a backfill, or whose notes answer 404, is deleted.",
)


class DeskConnector(http.HttpConnector[DeskConfig, http.HttpRecord], declaration=DESK):
    source = http.HttpSource("https://{config.account}.desk.example", (TICKETS,), http.BearerAuth())
