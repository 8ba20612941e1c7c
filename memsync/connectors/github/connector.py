"""The GitHub connector: issues, pull requests, comments, reviews, issue events, pull
request review comments and the cross-references of issue timelines.

What is read, per configured repository and window (through PyGithub, one request at
a time, every page followed through the ``Link`` header):

- ``GET /repos/{o}/{r}/issues?state=all&sort=updated&direction=asc&since=<start>``:
  issues *and* pull requests updated since the window start (a pull request is an
  issue item with a ``pull_request`` key, so recognising it costs no request);
- for each pull request in that list, ``GET /repos/{o}/{r}/pulls/{n}/reviews``;
- ``GET /repos/{o}/{r}/issues/comments?sort=updated&direction=asc&since=<start>``;
- ``GET /repos/{o}/{r}/issues/events`` (newest first, no ``since`` on GitHub's side):
  read until the first event older than the window start;
- ``GET /repos/{o}/{r}/pulls/comments?sort=updated&direction=asc&since=<start>``: review
  comments (on lines of a diff), by keyset pages like the issues list, to its end;
- ``GET /repos/{o}/{r}/issues/{n}/timeline`` for each issue and pull request updated in
  the window (the issues list again, as a stream of its own): its ``cross-referenced``,
  ``connected`` and ``committed`` items.

Each list is a stream of its own (:meth:`GitHubConnector.streams`: a repository's
issues with their reviews, its comments, its events), read one after the other, each
from its own checkpoint, and each yields its items oldest position first
(``updated_at``; ``created_at`` for events): the runner checkpoints a stream after
every committed batch without passing an item not yet yielded, so a run cut short by
the rate limit resumes where it stopped.

Deletions: GitHub lists none. An issue whose events in the window say it was
``transferred`` (or ``deleted``) is read again (``GET /repos/{o}/{r}/issues/{n}``): a
404 or 410, or an answer from another repository (a transfer redirects), makes it a
tombstone for the issue and everything below it; its events are then not handed out.
A review comment stored and absent from a read of the review-comment list to its end
(for those created since the window start) is gone: a listing reports it.

PyGithub is configured so that the connector, not the library, decides about waits:
no urllib3 retries and no throttling sleeps (``retry=None``,
``seconds_between_requests=None``); every page goes through the shared
:class:`~memsync.connectors.retry.Retrier` with its injected sleeper and clock. Pages are
asked for with PyGithub's public ``Github.requester.requestJson`` (its
authentication and host handling; ``createException`` maps an error status as PyGithub
would) and the connector follows the ``Link`` header itself: items stay the JSON GitHub
sent, so PyGithub's lazy objects never cost a request per item, and no private PyGithub
API is used. A redirect is an error (``StopRun``), never a page: PyGithub itself follows
only a 301 within the API host (a renamed repository), and a proxy or single sign-on
page answering in GitHub's place would otherwise look like an empty list.

Conditional requests: not used. PyGithub sends ``If-None-Match`` only from
``GithubObject.update()`` on a single, already fetched object, and its paginated lists
never do; every item we map comes complete in a list page, so there is nothing to
re-validate. A ``since`` poll that finds nothing costs one request per stream.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

from memsync.clock import Clock
from memsync.connectors._parsing import optional_int, optional_str, parse_iso_time, required_int
from memsync.connectors.base import (
    Cursor,
    Deletion,
    Listing,
    Progress,
    RecordConnector,
    Stream,
    Window,
    fetch_every_stream,
)
from memsync.connectors.config import SubjectTemplateField
from memsync.connectors.errors import RateLimited, RetryableError, StopRun
from memsync.connectors.github.declaration import (
    GITHUB,
    GitHubConfig,
)
from memsync.connectors.retry import Retrier, retry_after_from_headers
from memsync.connectors.webhooks import WebhookReceiver
from memsync.episode import JSONObject, KeyScope, Tombstone
from memsync.stopping import Sleeper

if TYPE_CHECKING:
    from github import Github, GithubException

#: Issue events after which the issue may be gone from the repository: it is read again.
GONE_EVENTS: frozenset[str] = frozenset({"transferred", "deleted"})

# GitHub asks clients to wait at least a minute after a secondary limit that names no
# wait ("wait for at least one minute before retrying", rate-limits docs).
_SECONDARY_LIMIT_WAIT = 60.0
_SOURCE = "github"


@dataclass(frozen=True, slots=True)
class RepoRef:
    """A repository as keys name it: lower-cased, since GitHub names are case-insensitive
    (``Acme/API`` and ``acme/api`` are one repository and must give one key)."""

    owner: str
    name: str

    @classmethod
    def parse(cls, full_name: str) -> RepoRef:
        owner, _, name = full_name.partition("/")
        return cls(owner=owner.lower(), name=name.lower())

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"

    @property
    def key_prefix(self) -> str:
        return f"{_SOURCE}:{self.owner}:{self.name}"

    def issue_key_prefix(self, number: int) -> str:
        """What the keys of an issue and of its comments and events start with."""
        return f"{self.key_prefix}:issue:{number}"

    def subject_values(
        self, number: int, author: str | None, kind: str
    ) -> Mapping[str, SubjectTemplateField]:
        """The subject fields of a record of this repository (``subject_fields``)."""
        return {
            "owner": self.owner,
            "repo": self.name,
            "repository": self.full_name,
            "number": number,
            "author": author,
            "kind": kind,
        }


class _GitHubItem:
    """What every GitHub record does alike. ``data`` is the payload, chosen when
    parsing: what a reader cares about, so an edit of a title, body or state changes it
    (a revision) and a new comment or reaction elsewhere does not."""

    __slots__ = ()
    data: JSONObject

    def payload(self) -> JSONObject:
        return dict(self.data)


class _EditableItem(_GitHubItem):
    """An issue or a comment: it can be edited, so GitHub lists it by ``updated_at``,
    its position; it happened at ``created_at``."""

    __slots__ = ()
    created_at: datetime
    updated_at: datetime

    @property
    def position(self) -> datetime:
        return self.updated_at

    @property
    def occurred_at(self) -> datetime:
        return self.created_at


@dataclass(frozen=True, slots=True)
class GitHubIssue(_EditableItem):
    """An issue or a pull request in its latest state (from the issues list)."""

    repo: RepoRef
    number: int
    is_pull_request: bool
    created_at: datetime
    updated_at: datetime
    author: str | None
    data: JSONObject

    @property
    def kind(self) -> str:
        """``issue`` or ``pull_request``: the subject's ``kind``, the episode type's end."""
        return "pull_request" if self.is_pull_request else "issue"

    def key(self) -> str:
        """``…:issue:{n}:opened`` or ``…:pull:{n}:opened``: issues and pull requests
        share GitHub's number space, so the two never name one item."""
        kind = "pull" if self.is_pull_request else "issue"
        return f"{self.repo.key_prefix}:{kind}:{self.number}:opened"

    @property
    def episode_type(self) -> str:
        return f"github.{self.kind}"

    def subject_values(self) -> Mapping[str, SubjectTemplateField]:
        return self.repo.subject_values(self.number, self.author, self.kind)


@dataclass(frozen=True, slots=True)
class GitHubComment(_EditableItem):
    """A comment on an issue or on a pull request's conversation."""

    repo: RepoRef
    issue_number: int
    comment_id: int
    created_at: datetime
    updated_at: datetime
    author: str | None
    data: JSONObject

    episode_type: ClassVar[str] = "github.issue_comment"

    def key(self) -> str:
        """``…:issue:{n}:comment:{id}``; comment ids are unique per repository."""
        return f"{self.repo.issue_key_prefix(self.issue_number)}:comment:{self.comment_id}"

    def subject_values(self) -> Mapping[str, SubjectTemplateField]:
        return self.repo.subject_values(self.issue_number, self.author, "issue_comment")


@dataclass(frozen=True, slots=True)
class GitHubIssueEvent(_GitHubItem):
    """One issue event (``closed``, ``labeled``, …); events are never edited."""

    repo: RepoRef
    issue_number: int
    event_id: int
    event: str
    created_at: datetime
    actor: str | None
    data: JSONObject
    read_at: datetime | None = None

    episode_type: ClassVar[str] = "github.issue_event"

    def key(self) -> str:
        """``…:issue:{n}:event:{id}``; event ids are unique per repository, and an event
        read from an issue's timeline (``connected``) has the id, key and payload it has
        in the events list: read by both streams, it is one episode."""
        return f"{self.repo.issue_key_prefix(self.issue_number)}:event:{self.event_id}"

    @property
    def position(self) -> datetime:
        # Events are listed by creation: they never change afterwards. One read from a
        # timeline is where its issue was found (``read_at``: the issue's updated_at).
        return self.read_at or self.created_at

    @property
    def occurred_at(self) -> datetime:
        return self.created_at

    def subject_values(self) -> Mapping[str, SubjectTemplateField]:
        return self.repo.subject_values(self.issue_number, self.actor, "issue_event")


@dataclass(frozen=True, slots=True)
class GitHubReview(_GitHubItem):
    """A submitted review of a pull request. ``pull_updated_at`` is its pull request's
    update time, the position the review was read at."""

    repo: RepoRef
    pull_number: int
    review_id: int
    submitted_at: datetime
    pull_updated_at: datetime
    author: str | None
    data: JSONObject

    episode_type: ClassVar[str] = "github.review"

    def key(self) -> str:
        """``…:pull:{n}:review:{id}``; review ids are unique per repository."""
        return f"{self.repo.key_prefix}:pull:{self.pull_number}:review:{self.review_id}"

    @property
    def position(self) -> datetime:
        # Reviews are read because their pull request was updated.
        return self.pull_updated_at

    @property
    def occurred_at(self) -> datetime:
        return self.submitted_at

    def subject_values(self) -> Mapping[str, SubjectTemplateField]:
        return self.repo.subject_values(self.pull_number, self.author, "review")


@dataclass(frozen=True, slots=True)
class GitHubReviewComment(_EditableItem):
    """A pull request review comment: a comment on a line of the diff (GitHub's
    ``/pulls/comments``), in its latest state."""

    repo: RepoRef
    pull_number: int
    comment_id: int
    created_at: datetime
    updated_at: datetime
    author: str | None
    data: JSONObject

    episode_type: ClassVar[str] = "github.review_comment"

    def key(self) -> str:
        """``…:pull:{n}:review_comment:{id}``: review comment ids are unique (GitHub
        never reuses them) and a comment never moves to another pull request, so the id
        names it; the number says where it is, beside its pull request's reviews."""
        return f"{self.repo.key_prefix}:pull:{self.pull_number}:review_comment:{self.comment_id}"

    def subject_values(self) -> Mapping[str, SubjectTemplateField]:
        return self.repo.subject_values(self.pull_number, self.author, "review_comment")


class _TimelineItem(_GitHubItem):
    """An item of an issue's timeline: read because its issue was updated, so its
    position is the issue's ``updated_at`` (``read_at``)."""

    __slots__ = ()
    read_at: datetime

    @property
    def position(self) -> datetime:
        return self.read_at


@dataclass(frozen=True, slots=True)
class GitHubCrossReference(_TimelineItem):
    """A ``cross-referenced`` timeline item: another issue or pull request (``source``)
    mentioned this one. It has no id."""

    repo: RepoRef
    issue_number: int
    source: RepoRef
    source_number: int
    occurred_at: datetime
    read_at: datetime
    actor: str | None
    data: JSONObject

    episode_type: ClassVar[str] = "github.cross_reference"

    def key(self) -> str:
        """``…:issue:{n}:cross_reference:{source owner}:{source repo}:{source number}``.
        GitHub gives the item no id; what it says is "that issue links to this one", so
        the pair names it (the earliest mention is kept when one issue mentions this one
        again): a re-read finds the same key, and a reference from another repository
        never collides with one from this repository."""
        source = f"{self.source.owner}:{self.source.name}:{self.source_number}"
        return f"{self.repo.issue_key_prefix(self.issue_number)}:cross_reference:{source}"

    def subject_values(self) -> Mapping[str, SubjectTemplateField]:
        return self.repo.subject_values(self.issue_number, self.actor, "cross_reference")


@dataclass(frozen=True, slots=True)
class GitHubCommit(_TimelineItem):
    """A ``committed`` timeline item: a commit of a pull request (or pushed to an issue's
    linked branch). It has no id, and its author is a git identity, not a login."""

    repo: RepoRef
    issue_number: int
    sha: str
    occurred_at: datetime
    read_at: datetime
    data: JSONObject

    episode_type: ClassVar[str] = "github.commit"

    def key(self) -> str:
        """``…:issue:{n}:commit:{sha}``: a sha names one commit forever, and the number
        says which pull request it is part of (one commit may be part of two)."""
        return f"{self.repo.issue_key_prefix(self.issue_number)}:commit:{self.sha}"

    def subject_values(self) -> Mapping[str, SubjectTemplateField]:
        # No login: a template naming {author} skips commits.
        return self.repo.subject_values(self.issue_number, None, "commit")


#: Every record the connector yields. Keys are built from ids only, repository
#: lower-cased: an item re-read in any window, by any instance, gets the same key.
GitHubRecord = (
    GitHubIssue
    | GitHubComment
    | GitHubIssueEvent
    | GitHubReview
    | GitHubReviewComment
    | GitHubCrossReference
    | GitHubCommit
)

#: The timeline items read (``timeline`` stream); the rest of a timeline is read by the
#: other streams (comments, events, reviews) or says nothing a memory needs.
TIMELINE_EVENTS: frozenset[str] = frozenset({"cross-referenced", "connected", "committed"})

# What reads one stream of one repository: (window start, window end) -> its items.
_StreamReader = Callable[[datetime | None, datetime], Iterator[GitHubRecord | Deletion]]


class _Gone(StopRun):
    """HTTP 404 or 410: fatal for a list (a wrong repository), the answer sought when an
    issue is read again to see whether it is still there."""


# One ``<url>; rel="name"`` entry of a ``Link`` header (RFC 8288, as GitHub writes it).
_LINK = re.compile(r'<([^>]*)>\s*;\s*rel="([^"]*)"')


class GitHubConnector(RecordConnector[GitHubConfig, GitHubRecord], declaration=GITHUB):
    """Issues, pull requests, comments, reviews and issue events of GitHub repositories.

    Repeats: every item updated in the window is re-read, and every review of an
    updated pull request; overlapping windows and backfills repeat records and keys
    make that free. Rate limits: primary (``x-ratelimit-remaining: 0``, wait until
    ``x-ratelimit-reset``) and secondary (``retry-after``, else a minute) limits are
    waited out within the ``retry`` caps, then :class:`RateLimitExhausted`; 5xx and
    connection errors back off, then :class:`RetryableError`; 401, a 403 that is not a
    rate limit, 404, 422 and any redirect but a 301 within the API host (which PyGithub
    follows) raise :class:`StopRun`.
    """

    def __init__(
        self,
        config: GitHubConfig,
        *,
        sleeper: Sleeper | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(config, sleeper=sleeper)
        self.retrier = Retrier(config.retry.policy(), sleeper=self.sleeper, clock=clock)
        self._client: Github | None = None

    @property
    def client(self) -> Github:
        # Created on first use: mapping records (the conformance kit, a dry run) never
        # needs a connection pool, and listing or validating connectors never imports
        # PyGithub.
        if self._client is None:
            from github import Auth, Github

            token = self.config.token
            self._client = Github(
                base_url=self.config.api_base,
                auth=Auth.Token(token.get_secret_value()) if token is not None else None,
                # The connector owns retries and waits (capped, injectable): PyGithub's
                # default retry sleeps inside urllib3, uncapped for Retry-After.
                retry=None,
                seconds_between_requests=None,
                seconds_between_writes=None,
                timeout=max(1, int(self.config.timeout.total_seconds())),
            )
        return self._client

    def source_updated_at(self, record: GitHubRecord) -> datetime | None:
        """An issue's, a comment's or a review comment's ``updated_at``: GitHub moves it
        with every edit. A review has no update time of its own (it can be edited and
        dismissed), so it is dated by its pull request's ``updated_at`` as read with it,
        which never goes back: a review read with an older pull request is the older
        read. An edit of a review that leaves its pull request's ``updated_at`` where it
        was ties with the version before it, and then arrival decides. Other records
        never change once written."""
        if isinstance(record, GitHubReview):
            return record.pull_updated_at
        return record.updated_at if isinstance(record, _EditableItem) else None

    def webhook_receiver(self) -> WebhookReceiver[GitHubRecord] | None:
        """``issues``, ``issue_comment``, ``pull_request``, ``pull_request_review`` and
        ``pull_request_review_comment`` deliveries, when ``webhook:`` is configured."""
        if self.config.webhook is None:
            return None
        # Imported here: the receiver module builds on this one's record parsers.
        from memsync.connectors.github.webhook import GitHubWebhookReceiver

        return GitHubWebhookReceiver(self.config, self.config.webhook.secret.get_secret_value())

    def close(self) -> None:
        """Close the HTTP session, if one was opened."""
        if self._client is not None:
            self._client.close()
            self._client = None

    # --- reading --------------------------------------------------------------------------

    def streams(self) -> tuple[Stream, ...]:
        """Per repository, in this order: ``{owner}/{repo}:issues`` (issues, pull
        requests and their reviews, by ``updated_at`` ascending), ``…:comments`` (by
        ``updated_at`` ascending), ``…:events`` (read whole, then handed out oldest
        first), ``…:review_comments`` (by ``updated_at`` ascending) and ``…:timeline``
        (each updated issue's timeline items, at the issue's ``updated_at``), as
        ``streams`` selects. All are ordered."""
        return tuple(stream for stream, _ in self._stream_readers())

    def fetch(
        self, window: Window, cursor: Cursor | None
    ) -> Iterator[GitHubRecord | Deletion | Progress]:
        """Every stream of every repository in turn (see :meth:`fetch_stream`)."""
        return fetch_every_stream(self, window, cursor)

    def fetch_stream(
        self, stream: Stream, window: Window, cursor: Cursor | None
    ) -> Iterator[GitHubRecord | Deletion]:
        """Yield the stream's items updated in the window, oldest position first (the
        events stream: then a tombstone for each issue found gone; the review comments:
        then a listing of those created since the window start). Items updated after
        ``window.end`` are left for the next run."""
        readers = {declared.name: read for declared, read in self._stream_readers()}
        if stream.name not in readers:
            raise ValueError(f"github '{self.name}' reads no stream {stream.name!r}")
        return readers[stream.name](window.start or self.config.start, window.end)

    def _stream_readers(self) -> Iterator[tuple[Stream, _StreamReader]]:
        wanted = self.config.streams
        for repo in (RepoRef.parse(full_name) for full_name in self.config.repo):
            if wanted & {"issues", "pull_requests", "reviews"}:
                yield Stream(f"{repo.full_name}:issues", ordered=True), partial(self._issues, repo)
            if "issue_comments" in wanted:
                comments = partial(self._comments, repo)
                yield Stream(f"{repo.full_name}:comments", ordered=True), comments
            if "issue_events" in wanted:
                yield Stream(f"{repo.full_name}:events", ordered=True), partial(self._events, repo)
            if "review_comments" in wanted:
                review_comments = partial(self._review_comments, repo)
                yield Stream(f"{repo.full_name}:review_comments", ordered=True), review_comments
            if "timeline" in wanted:
                timeline = partial(self._timeline, repo)
                yield Stream(f"{repo.full_name}:timeline", ordered=True), timeline

    def _issues(
        self, repo: RepoRef, since: datetime | None, until: datetime
    ) -> Iterator[GitHubRecord]:
        params: dict[str, Any] = {"state": "all", "sort": "updated", "direction": "asc"}
        wanted = self.config.streams
        for raw in self._updated_ascending(repo, "/issues", params, since, until):
            issue = _issue(repo, raw)
            if issue.updated_at > until:
                return  # ascending: everything after this was updated after the window
            kind = "pull_requests" if issue.is_pull_request else "issues"
            if kind in wanted:
                yield issue
            if issue.is_pull_request and "reviews" in wanted:
                yield from self._reviews(issue)

    def _reviews(self, pull: GitHubIssue) -> Iterator[GitHubReview]:
        for raw in self._list(pull.repo, f"/pulls/{pull.number}/reviews", {}):
            review = _review(pull, raw)
            if review is not None:
                yield review

    def _comments(
        self, repo: RepoRef, since: datetime | None, until: datetime
    ) -> Iterator[GitHubComment]:
        params: dict[str, Any] = {"sort": "updated", "direction": "asc"}
        for raw in self._updated_ascending(repo, "/issues/comments", params, since, until):
            comment = _comment(repo, raw)
            if comment.updated_at > until:
                return
            yield comment

    def _review_comments(
        self, repo: RepoRef, since: datetime | None, until: datetime
    ) -> Iterator[GitHubReviewComment | Listing]:
        """Review comments updated in the window, oldest first (keyset pages, as
        issues), then, when the read reached the end of the list, a listing of the
        comments created since ``since``.

        Every comment created at or after ``since`` was updated then too, so the
        ``since`` list holds every one that still exists, and one stored and absent was
        deleted. Comments on the last page updated after ``until`` are left for the next
        run, but they are present. A read that stopped at ``until`` with pages left (a
        backfill slice) or was cut short lists nothing."""
        params: dict[str, Any] = {"sort": "updated", "direction": "asc"}
        present: set[str] = set()
        pages = self._updated_ascending(repo, "/pulls/comments", params, since, until)
        while True:
            try:
                raw = next(pages)
            except StopIteration as stop:
                if not stop.value:
                    return
                break
            comment = _review_comment(repo, raw)
            present.add(comment.key())
            if comment.updated_at <= until:
                yield comment
        scope = KeyScope(
            f"{repo.key_prefix}:pull:",
            occurred_from=since,
            episode_types=frozenset({GitHubReviewComment.episode_type}),
        )
        yield Listing(scope, frozenset(present))

    def _timeline(
        self, repo: RepoRef, since: datetime | None, until: datetime
    ) -> Iterator[GitHubIssueEvent | GitHubCrossReference | GitHubCommit]:
        """For each issue and pull request updated in the window (the issues list, by
        keyset pages, oldest first), its timeline's ``cross-referenced``, ``connected``
        and ``committed`` items, at the issue's ``updated_at``."""
        params: dict[str, Any] = {"state": "all", "sort": "updated", "direction": "asc"}
        for raw in self._updated_ascending(repo, "/issues", params, since, until):
            issue = _issue(repo, raw)
            if issue.updated_at > until:
                return
            yield from self._timeline_of(issue)

    def _timeline_of(
        self, issue: GitHubIssue
    ) -> Iterator[GitHubIssueEvent | GitHubCrossReference | GitHubCommit]:
        path = f"/issues/{issue.number}/timeline"
        try:
            timeline = self._whole_list(issue.repo, path)
        except _Gone:
            return  # deleted since the issues list named it: nothing to read
        seen: set[str] = set()
        for raw in timeline:
            event = raw.get("event")
            if event not in TIMELINE_EVENTS:
                continue
            record = _timeline_item(issue, raw)
            # One issue mentioning this one twice is one cross-reference: the first.
            if record.key() not in seen:
                seen.add(record.key())
                yield record

    def _whole_list(self, repo: RepoRef, path: str) -> list[JSONObject]:
        """Every item of a list that has no ``since`` and only ever loses items or gains
        them at its end (an issue's timeline: a comment deleted leaves it).

        One page is one answer, whole. A longer list is read by page numbers, so an item
        leaving a page already read would slide the next page's first item onto it,
        unseen: it is read again until a read holds every item of the read before it.
        An item gone meanwhile shows as missing from the later read, and only an item
        read before it left can shift another away, so a read whose items all remain in
        the next missed nothing; items leave a list only so often, so the reads end."""
        previous: list[JSONObject] | None = None
        while True:
            items: list[JSONObject] = []
            more = False
            for raw, has_next in self._pages(repo, path, {}):
                items.append(raw)
                more = more or has_next
            if not more:
                return items  # one page
            if previous is not None and {_list_identity(r) for r in previous} <= {
                _list_identity(r) for r in items
            }:
                return items
            previous = items

    def _events(
        self, repo: RepoRef, since: datetime | None, until: datetime
    ) -> Iterator[GitHubIssueEvent | Tombstone]:
        """The repository's events in the window, oldest first, then a tombstone for each
        issue they show gone (whose events are then not handed out)."""
        # GitHub lists repository events newest first and has no ``since``: read until
        # the first event older than the window, then hand them out oldest first.
        newest_first: list[GitHubIssueEvent] = []
        suspects: dict[int, None] = {}
        for raw in self._list(repo, "/issues/events", {}):
            event = _event(repo, raw)
            if since is not None and event.created_at < since:
                break
            if event.created_at > until:
                continue
            if event.event in GONE_EVENTS:
                suspects[event.issue_number] = None
            if event.event in self.config.event_types:
                newest_first.append(event)
        missing = {number for number in suspects if self._issue_is_gone(repo, number)}
        yield from (e for e in reversed(newest_first) if e.issue_number not in missing)
        for number in sorted(missing):
            yield Tombstone(repo.issue_key_prefix(number), with_children=True)

    def _issue_is_gone(self, repo: RepoRef, number: int) -> bool:
        """Read the issue again: gone when it answers 404 or 410, or when the answer is
        an issue of another repository (GitHub redirects a transferred issue)."""
        url = f"{self.config.api_base}/repos/{repo.owner}/{repo.name}/issues/{number}"
        what = f"github '{self.name}': GET /repos/{repo.full_name}/issues/{number}"
        try:
            _, issue = self._call(url, None, what)
        except _Gone:
            return True
        where = issue.get("repository_url") if isinstance(issue, dict) else None
        return not str(where or "").lower().endswith(f"/repos/{repo.full_name}")

    def _updated_ascending(
        self,
        repo: RepoRef,
        path: str,
        params: dict[str, Any],
        since: datetime | None,
        until: datetime,
    ) -> Generator[JSONObject, None, bool]:
        """Every item of a ``sort=updated&direction=asc`` list updated at or after
        ``since``, oldest first, each version of an item once (by ``id`` and
        ``updated_at``): an item updated while the list is read comes again later, as
        the newer version it is. It stops after the first page that reaches past
        ``until`` (the caller stops at the first item past it), and returns whether
        that page was the list's last.

        Keyset pagination: each next page is page 1 of ``since=<the latest updated_at
        seen>`` (inclusive; the items of that second seen before are dropped), never
        page 2. GitHub pages by offset, so an item updated between two page requests
        leaves its place for the end of the list, every later item moves one place
        earlier, and the one at the next page's boundary would never be returned; from
        page 1 of a later ``since`` the items left to read have nowhere to move from.
        Each step moves ``since`` forward, except when one second holds a whole page:
        then that second is read on its own (:meth:`_one_second`) and the list goes on
        from the next second, so the walk always ends.
        """
        floor = since
        seen_at_floor: set[tuple[int, datetime]] = set()
        while True:
            page, more = self._first_page(repo, path, params, floor)
            if not page:
                return True
            top = max(updated for _, _, updated in page)
            if more and top <= until and all(updated == top for _, _, updated in page):
                # A page of one second: the next ``since`` could not move past it.
                for raw in self._one_second(repo, path, params, top):
                    if (_item_id(raw), top) not in seen_at_floor:
                        yield raw
                floor, seen_at_floor = top + timedelta(seconds=1), set()
                continue
            for raw, ident, updated in page:
                if (ident, updated) not in seen_at_floor:
                    seen_at_floor.add((ident, updated))
                    yield raw
            if not more or top > until:
                return not more
            floor = top
            seen_at_floor = {(ident, updated) for ident, updated in seen_at_floor if updated == top}

    def _first_page(
        self, repo: RepoRef, path: str, params: dict[str, Any], since: datetime | None
    ) -> tuple[list[tuple[JSONObject, int, datetime]], bool]:
        """Page 1 of the list from ``since``: its items with their ids and update times,
        and whether a next page exists."""
        query = dict(params) if since is None else {**params, "since": _github_time(since)}
        page: list[tuple[JSONObject, int, datetime]] = []
        more = False
        for raw, has_next in self._pages(repo, path, query, pages=1):
            page.append((raw, _item_id(raw), _item_updated(raw)))
            more = has_next
        return page, more

    def _one_second(
        self, repo: RepoRef, path: str, params: dict[str, Any], second: datetime
    ) -> list[JSONObject]:
        """Every item last updated in ``second`` when they fill more than a page: read by
        page numbers (``since`` cannot tell them apart), and read again until two reads
        find the same items. An item of the second updated during a read leaves it,
        shifting the later pages, so that read may have missed one; items only ever
        leave a past second, so the reads agree after at most as many as it holds."""
        query = {**params, "since": _github_time(second)}
        previous: frozenset[int] | None = None
        while True:
            found: list[JSONObject] = []
            for raw, _ in self._pages(repo, path, query):
                if _item_updated(raw) > second:
                    break  # ascending: the second is over
                found.append(raw)
            ids = frozenset(_item_id(raw) for raw in found)
            if ids == previous:
                return found
            previous = ids

    def _list(self, repo: RepoRef, path: str, params: dict[str, Any]) -> Iterator[JSONObject]:
        """Every item of a list endpoint, following the ``Link`` header's ``next`` page by
        page."""
        for item, _ in self._pages(repo, path, params):
            yield item

    def _pages(
        self, repo: RepoRef, path: str, params: dict[str, Any], *, pages: int | None = None
    ) -> Iterator[tuple[JSONObject, bool]]:
        """Each item of a list endpoint with whether a page follows its page, following
        the ``Link`` header's ``next`` page by page (at most ``pages``); each page goes
        through the Retrier on its own, so a retry asks for exactly the page that
        failed."""
        what = f"github '{self.name}': GET /repos/{repo.full_name}{path}"
        url: str | None = f"{self.config.api_base}/repos/{repo.owner}/{repo.name}{path}"
        page_params: dict[str, Any] | None = {**params, "per_page": self.config.per_page}
        asked = 0
        while url is not None and (pages is None or asked < pages):
            headers, items = self._call(url, page_params, what)
            asked += 1
            if not isinstance(items, list):
                raise StopRun(f"{what}: the response is not a JSON list: {str(items)[:200]}")
            # An empty page ends the list whatever its links say: a server linking past
            # the end costs no extra request.
            url = _next_link(headers) if items else None
            page_params = None  # a next link carries the whole query
            for item in items:
                if not isinstance(item, dict):
                    raise StopRun(f"{what}: a list item is not a JSON object: {item!r}")
                yield item, url is not None

    # --- HTTP errors ----------------------------------------------------------------------

    def _call(
        self, url: str, params: dict[str, Any] | None, what: str
    ) -> tuple[Mapping[str, Any], Any]:
        """One page: its headers and its JSON. PyGithub's public request call (its
        authentication and host handling, and a 301 within the same host followed, as a
        renamed repository answers); every other 3xx is an error here, never a page."""
        import requests

        requester = self.client.requester

        def attempt() -> tuple[Mapping[str, Any], Any]:
            try:
                status, headers, body = requester.requestJson("GET", url, parameters=params)
            except requests.RequestException as error:
                raise RetryableError(f"{what} failed: {type(error).__name__}: {error}") from error
            except RuntimeError as error:  # PyGithub refusing a 301 to another host
                raise StopRun(f"{what}: {error}") from error
            if 300 <= status < 400:
                # A proxy or an SSO page answering in GitHub's place: its body is no
                # page of the list, and taking it for one would skip records silently.
                where = headers.get("location", "nowhere")
                raise StopRun(
                    f"{what}: HTTP {status} redirect to {where}; the API must answer "
                    f"directly. Check base_url {self.config.api_base} (and any proxy or "
                    "single sign-on in front of it)."
                )
            data = _json_body(body)
            if status >= 400:
                raise self._classify(requester.createException(status, headers, data), what)
            return headers, data

        return self.retrier.call(attempt, what=what)

    def _classify(self, error: GithubException, what: str) -> Exception:
        status = error.status
        headers = {str(k).lower(): str(v) for k, v in (error.headers or {}).items()}
        message = _error_message(error)
        wait = retry_after_from_headers(headers, self.retrier.clock.now())
        if status in (403, 429):
            if headers.get("x-ratelimit-remaining") == "0":
                reset = headers.get("x-ratelimit-reset", "unknown")
                return RateLimited(
                    f"{what}: HTTP {status} primary rate limit exhausted (resets at epoch "
                    f"{reset}): {message}",
                    retry_after=wait,
                )
            if "retry-after" in headers or "secondary rate limit" in message.lower():
                return RateLimited(
                    f"{what}: HTTP {status} secondary rate limit: {message}",
                    retry_after=wait if wait is not None else _SECONDARY_LIMIT_WAIT,
                )
            if status == 429:
                return RateLimited(f"{what}: HTTP 429: {message}", retry_after=wait)
            return StopRun(
                f"{what}: HTTP 403 {message!r}: the token has no access to this repository "
                "(or lacks the Issues/Pull requests read permission). Check the token's "
                "scopes and repository access."
            )
        if status == 401:
            return StopRun(
                f"{what}: HTTP 401 {message!r}: GitHub refused the token. Create a new token "
                "and update the connector's 'token'."
            )
        if status in (404, 410):
            return _Gone(
                f"{what}: HTTP {status}: not found. Check the repository name, that the token "
                f"can see it (private repositories answer 404 without access), and base_url "
                f"{self.config.api_base}"
            )
        if status >= 500:
            return RetryableError(f"{what}: HTTP {status}: {message}", retry_after=wait)
        return StopRun(f"{what}: HTTP {status}: {message}")


# --- parsing list items ---------------------------------------------------------------------


def _issue(repo: RepoRef, raw: Mapping[str, Any]) -> GitHubIssue:
    """An item of the issues list: a pull request is one with a ``pull_request`` object
    (which holds its ``merged_at``)."""
    pull = raw.get("pull_request")
    if isinstance(pull, dict):
        return _issue_or_pull(repo, raw, is_pull=True, merged_at=pull.get("merged_at"))
    return _issue_or_pull(repo, raw, is_pull=False, merged_at=None)


def _pull(repo: RepoRef, raw: Mapping[str, Any]) -> GitHubIssue:
    """A pull request object (the ``pull_request`` of a webhook delivery, GitHub's pulls
    API) as the issues list's item for the same pull request: one key and payload."""
    return _issue_or_pull(repo, raw, is_pull=True, merged_at=raw.get("merged_at"))


def _issue_or_pull(
    repo: RepoRef, raw: Mapping[str, Any], *, is_pull: bool, merged_at: object
) -> GitHubIssue:
    """The one mapping of an issue or pull request, whichever object GitHub sent: the
    issues list's item and a pull request object carry the same fields but these two."""
    author = _login(raw.get("user"))
    # updated_at and the comment count are left out: a new comment bumps both, and
    # must be one new comment episode, not also a revision of its issue.
    data: JSONObject = {
        "number": raw.get("number"),
        "title": raw.get("title"),
        "body": raw.get("body"),
        "state": raw.get("state"),
        # Why an issue was closed. A pull request object has no state_reason (merged_at
        # says how it ended), so a pull request says none whichever way it was read.
        "state_reason": None if is_pull else raw.get("state_reason"),
        "author": author,
        "labels": sorted(_names(raw.get("labels"), "name")),
        "assignees": sorted(_names(raw.get("assignees"), "login")),
        "milestone": _name(raw.get("milestone"), "title"),
        "locked": raw.get("locked"),
        "created_at": raw.get("created_at"),
        "closed_at": raw.get("closed_at"),
        "html_url": raw.get("html_url"),
        "is_pull_request": is_pull,
    }
    if is_pull:
        data["merged_at"] = merged_at
    return GitHubIssue(
        repo=repo,
        number=required_int(raw, "number", "issue", source=_SOURCE),
        is_pull_request=is_pull,
        created_at=parse_iso_time(raw.get("created_at"), "issue created_at", source=_SOURCE),
        updated_at=parse_iso_time(raw.get("updated_at"), "issue updated_at", source=_SOURCE),
        author=author,
        data=data,
    )


def _review(pull: GitHubIssue, raw: Mapping[str, Any]) -> GitHubReview | None:
    """A review of ``pull`` as its reviews list or a ``pull_request_review`` delivery
    gives it; ``None`` for a pending review (not submitted: visible only to its author).
    The list says ``APPROVED`` where a delivery says ``approved``: the state is kept
    upper-case, as the list gives it, so both are one payload."""
    submitted = raw.get("submitted_at")
    if submitted is None:
        return None
    state = optional_str(raw.get("state"))
    author = _login(raw.get("user"))
    return GitHubReview(
        repo=pull.repo,
        pull_number=pull.number,
        review_id=required_int(raw, "id", "review", source=_SOURCE),
        submitted_at=parse_iso_time(submitted, "review submitted_at", source=_SOURCE),
        pull_updated_at=pull.updated_at,
        author=author,
        data={
            "id": raw.get("id"),
            "pull_number": pull.number,
            "state": state.upper() if state is not None else None,
            "body": raw.get("body"),
            "author": author,
            "commit_id": raw.get("commit_id"),
            "submitted_at": submitted,
            "html_url": raw.get("html_url"),
        },
    )


def _comment(repo: RepoRef, raw: Mapping[str, Any]) -> GitHubComment:
    # The comment names its issue only through issue_url (…/issues/{number}).
    issue_url = optional_str(raw.get("issue_url")) or ""
    number = issue_url.rstrip("/").rsplit("/", 1)[-1]
    if not number.isdigit():
        raise StopRun(f"{_SOURCE}: comment {raw.get('id')!r} has no issue_url: {issue_url!r}")
    author = _login(raw.get("user"))
    return GitHubComment(
        repo=repo,
        issue_number=int(number),
        comment_id=required_int(raw, "id", "comment", source=_SOURCE),
        created_at=parse_iso_time(raw.get("created_at"), "comment created_at", source=_SOURCE),
        updated_at=parse_iso_time(raw.get("updated_at"), "comment updated_at", source=_SOURCE),
        author=author,
        data={
            "id": raw.get("id"),
            "issue_number": int(number),
            "body": raw.get("body"),
            "author": author,
            "created_at": raw.get("created_at"),
            "html_url": raw.get("html_url"),
        },
    )


def _event(
    repo: RepoRef,
    raw: Mapping[str, Any],
    number: int | None = None,
    read_at: datetime | None = None,
) -> GitHubIssueEvent:
    """An event of the repository's list (which embeds its ``issue``), or of the
    timeline of issue ``number`` read at ``read_at``: the same key and payload."""
    if number is None:
        issue = raw.get("issue")
        number = optional_int(issue.get("number")) if isinstance(issue, dict) else None
    if number is None:
        raise StopRun(f"{_SOURCE}: issue event {raw.get('id')!r} names no issue number")
    event = optional_str(raw.get("event")) or "unknown"
    actor = _login(raw.get("actor"))
    data: JSONObject = {
        "id": raw.get("id"),
        "issue_number": number,
        "event": event,
        "actor": actor,
        "created_at": raw.get("created_at"),
        "commit_id": raw.get("commit_id"),
    }
    # Only what the event type carries, so a labeled event says which label.
    if isinstance(raw.get("label"), dict):
        data["label"] = _name(raw.get("label"), "name")
    if isinstance(raw.get("assignee"), dict):
        data["assignee"] = _login(raw.get("assignee"))
    if isinstance(raw.get("milestone"), dict):
        data["milestone"] = _name(raw.get("milestone"), "title")
    if isinstance(raw.get("rename"), dict):
        data["rename"] = raw.get("rename")
    return GitHubIssueEvent(
        repo=repo,
        issue_number=number,
        event_id=required_int(raw, "id", "issue event", source=_SOURCE),
        event=event,
        created_at=parse_iso_time(raw.get("created_at"), "event created_at", source=_SOURCE),
        actor=actor,
        data=data,
        read_at=read_at,
    )


def _review_comment(repo: RepoRef, raw: Mapping[str, Any]) -> GitHubReviewComment:
    # The comment names its pull request only through pull_request_url (…/pulls/{n}).
    pull_url = optional_str(raw.get("pull_request_url")) or ""
    number = pull_url.rstrip("/").rsplit("/", 1)[-1]
    if not number.isdigit():
        raise StopRun(
            f"{_SOURCE}: review comment {raw.get('id')!r} has no pull_request_url: {pull_url!r}"
        )
    author = _login(raw.get("user"))
    # Where the comment sits in the current diff (position, line, side, commit_id) moves
    # with every push, without an edit; the original_* fields and the hunk stay.
    return GitHubReviewComment(
        repo=repo,
        pull_number=int(number),
        comment_id=required_int(raw, "id", "review comment", source=_SOURCE),
        created_at=parse_iso_time(
            raw.get("created_at"), "review comment created_at", source=_SOURCE
        ),
        updated_at=parse_iso_time(
            raw.get("updated_at"), "review comment updated_at", source=_SOURCE
        ),
        author=author,
        data={
            "id": raw.get("id"),
            "pull_number": int(number),
            "review_id": raw.get("pull_request_review_id"),
            "in_reply_to_id": raw.get("in_reply_to_id"),
            "body": raw.get("body"),
            "author": author,
            "path": raw.get("path"),
            "diff_hunk": raw.get("diff_hunk"),
            "original_line": raw.get("original_line"),
            "original_start_line": raw.get("original_start_line"),
            "original_commit_id": raw.get("original_commit_id"),
            "created_at": raw.get("created_at"),
            "html_url": raw.get("html_url"),
        },
    )


def _timeline_item(
    issue: GitHubIssue, raw: Mapping[str, Any]
) -> GitHubIssueEvent | GitHubCrossReference | GitHubCommit:
    """A ``cross-referenced``, ``connected`` or ``committed`` item of ``issue``'s
    timeline (see :data:`TIMELINE_EVENTS`)."""
    event = raw.get("event")
    if event == "connected":
        return _event(issue.repo, raw, issue.number, read_at=issue.updated_at)
    if event == "committed":
        sha = optional_str(raw.get("sha"))
        if not sha:
            raise StopRun(f"{_SOURCE}: a committed item of #{issue.number} has no sha")
        author = _object(raw.get("author"))
        committer = _object(raw.get("committer"))
        when = committer.get("date") or author.get("date")
        return GitHubCommit(
            repo=issue.repo,
            issue_number=issue.number,
            sha=sha,
            occurred_at=parse_iso_time(when, "commit date", source=_SOURCE),
            read_at=issue.updated_at,
            data={
                "sha": sha,
                "issue_number": issue.number,
                "message": raw.get("message"),
                "author_name": author.get("name"),
                "authored_at": author.get("date"),
                "committed_at": committer.get("date"),
                "html_url": raw.get("html_url"),
            },
        )
    return _cross_reference(issue, raw)


def _cross_reference(issue: GitHubIssue, raw: Mapping[str, Any]) -> GitHubCrossReference:
    source = raw.get("source")
    referencing = source.get("issue") if isinstance(source, dict) else None
    if not isinstance(referencing, dict):
        raise StopRun(f"{_SOURCE}: a cross-reference of #{issue.number} names no source issue")
    # repository_url is …/repos/{owner}/{repo}: a reference may come from elsewhere.
    where = (optional_str(referencing.get("repository_url")) or "").rstrip("/").split("/")
    if len(where) < 3 or where[-3] != "repos":
        raise StopRun(
            f"{_SOURCE}: the source of a cross-reference of #{issue.number} has no "
            f"repository_url: {referencing.get('repository_url')!r}"
        )
    source_repo = RepoRef.parse(f"{where[-2]}/{where[-1]}")
    number = required_int(referencing, "number", "cross-reference source", source=_SOURCE)
    actor = _login(raw.get("actor"))
    # The source's state and update time are left out: closing the referencing issue
    # is not an edit of the reference (its title is what a reader needs to know).
    return GitHubCrossReference(
        repo=issue.repo,
        issue_number=issue.number,
        source=source_repo,
        source_number=number,
        occurred_at=parse_iso_time(
            raw.get("created_at"), "cross-reference created_at", source=_SOURCE
        ),
        read_at=issue.updated_at,
        actor=actor,
        data={
            "issue_number": issue.number,
            "source_repository": source_repo.full_name,
            "source_number": number,
            "source_title": referencing.get("title"),
            "source_is_pull_request": isinstance(referencing.get("pull_request"), dict),
            "source_html_url": referencing.get("html_url"),
            "actor": actor,
            "created_at": raw.get("created_at"),
        },
    )


def _list_identity(raw: Mapping[str, Any]) -> str:
    """What names an item of a timeline whatever its kind: its id (or node id), a
    commit's sha, a cross-reference's source and time."""
    for field in ("id", "node_id", "sha"):
        if raw.get(field) is not None:
            return f"{field}:{raw[field]}"
    source = raw.get("source")
    referencing = source.get("issue") if isinstance(source, dict) else None
    url = referencing.get("url") if isinstance(referencing, dict) else None
    return f"{raw.get('event')}:{url}:{raw.get('created_at')}"


def _item_id(raw: Mapping[str, Any]) -> int:
    return required_int(raw, "id", "list item", source=_SOURCE)


def _item_updated(raw: Mapping[str, Any]) -> datetime:
    return parse_iso_time(raw.get("updated_at"), "list item updated_at", source=_SOURCE)


def _object(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _login(user: object) -> str | None:
    return _name(user, "login")


def _name(value: object, field: str) -> str | None:
    return optional_str(value.get(field)) if isinstance(value, dict) else None


def _names(values: object, field: str) -> list[str]:
    if not isinstance(values, list):
        return []
    return [name for value in values if (name := _name(value, field)) is not None]


def _next_link(headers: Mapping[str, object]) -> str | None:
    """The ``rel="next"`` url of a response's ``Link`` header, if there is one."""
    link = headers.get("link")
    if not isinstance(link, str):
        return None
    return next((url for url, rel in _LINK.findall(link) if rel == "next"), None)


def _json_body(body: str) -> Any:
    """A response body as PyGithub reads one: empty is ``None``, JSON is parsed, and any
    other text is kept as ``{"data": text}`` (an HTML error page of a proxy)."""
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return {"data": body}


def _github_time(moment: datetime) -> str:
    # GitHub's ``since`` takes whole seconds; truncating moves it earlier, never later.
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _error_message(error: GithubException) -> str:
    data = error.data
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return str(data["message"])
    return str(data)[:200] if data else "(no body)"
