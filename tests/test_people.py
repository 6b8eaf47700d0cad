"""The People pages and services: admins add people, change roles, deactivate and reactivate,
reset passwords and unlock lockouts; each change is validated, audited and keeps an active admin."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse

from controlpanel.roles import user_role
from core.models import AuditEvent
from people import services

pytestmark = pytest.mark.django_db


def _login_works(client, username: str, password: str) -> bool:
    client.logout()
    response = client.post("/accounts/login/", {"username": username, "password": password})
    return response.status_code == 302 and response.url == reverse("dashboard:index")


def _fresh(user: User) -> User:
    return User.objects.get(pk=user.pk)


# --- services ----------------------------------------------------------------------------------


def test_admin_adds_a_person_who_signs_in_with_the_generated_password(client, admin_user):
    new = services.person_create(username="nina", email="nina@lab.example", role="operator", actor=admin_user)
    assert len(new.password) >= 20
    nina = User.objects.get(username="nina")
    assert nina.email == "nina@lab.example" and not nina.is_staff and not nina.is_superuser
    assert user_role(nina) == "operator"
    assert _login_works(client, "nina", new.password)
    event = AuditEvent.objects.get(action="person.create")
    assert event.actor == admin_user and event.object_id == str(nina.pk)
    assert new.password not in event.summary and new.password not in str(event.data)


@pytest.mark.parametrize(
    ("username", "email", "role", "field"),
    [
        ("", "", "viewer", "username"),
        ("has space", "", "viewer", "username"),
        ("x" * 151, "", "viewer", "username"),
        ("VERA", "", "viewer", "username"),  # vera exists; names ignore case
        ("nina", "not-an-email", "viewer", "email"),
        ("nina", "", "root", "role"),
        ("nina", "", "", "role"),
    ],
)
def test_bad_input_is_refused_with_nothing_stored(admin_user, viewer, username, email, role, field):
    users, events = User.objects.count(), AuditEvent.objects.count()
    with pytest.raises(ValidationError) as caught:
        services.person_create(username=username, email=email, role=role, actor=admin_user)
    assert field in caught.value.message_dict
    assert (User.objects.count(), AuditEvent.objects.count()) == (users, events)


def test_only_admins_manage_people(viewer, operator, admin_user):
    for actor in (viewer, operator):
        with pytest.raises(PermissionDenied):
            services.person_create(username="nina", role="viewer", actor=actor)
        with pytest.raises(PermissionDenied):
            services.person_set_role(user=viewer, role="admin", actor=actor)
        with pytest.raises(PermissionDenied):
            services.person_set_active(user=admin_user, active=False, actor=actor)
        with pytest.raises(PermissionDenied):
            services.person_reset_password(user=admin_user, actor=actor)
        with pytest.raises(PermissionDenied):
            services.person_unlock(user=admin_user, actor=actor)
        with pytest.raises(PermissionDenied):
            services.people_list(actor=actor)
    assert user_role(_fresh(operator)) == "operator" and _fresh(admin_user).is_active


def test_role_change_is_audited(admin_user, operator):
    services.person_set_role(user=operator, role="admin", actor=admin_user)
    assert user_role(_fresh(operator)) == "admin"
    assert set(_fresh(operator).groups.values_list("name", flat=True)) == {"admin"}
    event = AuditEvent.objects.get(action="person.role")
    assert event.data == {"username": "otto", "from": "operator", "to": "admin"}
    services.person_set_role(user=operator, role="viewer", actor=admin_user)
    assert user_role(_fresh(operator)) == "viewer"


def test_the_last_admin_cannot_demote_or_deactivate_themselves(admin_user, operator):
    with pytest.raises(ValidationError, match="last active admin"):
        services.person_set_role(user=admin_user, role="viewer", actor=admin_user)
    with pytest.raises(ValidationError, match="yourself"):
        services.person_set_active(user=admin_user, active=False, actor=admin_user)
    assert user_role(_fresh(admin_user)) == "admin"
    # With a second active admin, stepping down is fine.
    services.person_set_role(user=operator, role="admin", actor=admin_user)
    services.person_set_role(user=admin_user, role="operator", actor=admin_user)
    assert user_role(_fresh(admin_user)) == "operator"


def test_no_change_leaves_the_panel_without_an_active_admin(admin_user, django_user_model):
    root = django_user_model.objects.create_superuser("root", "", "pw-root-long")
    other = django_user_model.objects.create_user("bea", password="pw-bea")
    other.groups.add(Group.objects.get_or_create(name="admin")[0])
    services.person_set_active(user=other, active=False, actor=root)
    services.person_set_role(user=admin_user, role="viewer", actor=root)
    # root is now the only active admin: nobody may demote them (an inactive admin does not count).
    with pytest.raises(ValidationError, match="last active admin"):
        services.person_set_role(user=root, role="operator", actor=root)
    services.person_set_active(user=other, active=True, actor=root)
    services.person_set_role(user=root, role="operator", actor=root)
    root = _fresh(root)
    assert not root.is_superuser and not root.is_staff and user_role(root) == "operator"


def test_only_a_superuser_changes_a_superuser(admin_user, django_user_model):
    root = django_user_model.objects.create_superuser("root", "", "pw-root-long")
    for change in (
        lambda: services.person_reset_password(user=root, actor=admin_user),
        lambda: services.person_set_role(user=root, role="viewer", actor=admin_user),
        lambda: services.person_set_active(user=root, active=False, actor=admin_user),
    ):
        with pytest.raises(PermissionDenied):
            change()
    assert _fresh(root).check_password("pw-root-long") and _fresh(root).is_superuser


def test_deactivation_ends_sessions_and_reactivation_restores_sign_in(client, admin_user, viewer):
    client.force_login(viewer)
    assert client.get(reverse("dashboard:index")).status_code == 200
    services.person_set_active(user=viewer, active=False, actor=admin_user)
    response = client.get(reverse("dashboard:index"))
    assert response.status_code == 302 and response.url.startswith("/accounts/login/")
    assert not _login_works(client, "vera", "pw-vera")
    services.person_set_active(user=viewer, active=True, actor=admin_user)
    assert _login_works(client, "vera", "pw-vera")
    assert list(AuditEvent.objects.order_by("created_at").values_list("action", flat=True)) == [
        "person.deactivate",
        "person.reactivate",
    ]


def test_password_reset_replaces_the_password_and_ends_sessions(client, admin_user, viewer):
    client.force_login(viewer)
    new = services.person_reset_password(user=viewer, actor=admin_user)
    response = client.get(reverse("dashboard:index"))
    assert response.status_code == 302  # the old session is gone
    assert not _login_works(client, "vera", "pw-vera")
    assert _login_works(client, "vera", new.password)
    event = AuditEvent.objects.get(action="person.password_reset")
    assert new.password not in event.summary and new.password not in str(event.data)


# --- pages -------------------------------------------------------------------------------------


def test_people_page_lists_role_last_login_and_lockout(client, admin_user, viewer, operator, settings):
    settings.AXES_FAILURE_LIMIT = 2
    for _ in range(2):
        client.post("/accounts/login/", {"username": "otto", "password": "wrong"})
    _login_works(client, "vera", "pw-vera")
    client.force_login(admin_user)
    page = client.get(reverse("people:list")).content.decode()
    assert "People" in page and 'data-person="otto"' in page and 'data-person="vera"' in page
    otto_row = page.split('data-person="otto"')[1].split("</tr>")[0]
    vera_row = page.split('data-person="vera"')[1].split("</tr>")[0]
    assert "operator" in otto_row and "locked out" in otto_row and "never" in otto_row
    assert "viewer" in vera_row and "locked out" not in vera_row and "never" not in vera_row
    assert "1 locked out" in page


def test_add_page_shows_the_password_once_and_never_caches_it(client, admin_user):
    client.force_login(admin_user)
    assert client.get(reverse("people:add")).status_code == 200
    response = client.post(reverse("people:add"), {"username": "nina", "email": "", "role": "viewer"})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    body = response.content.decode()
    password = body.split('id="one-time-password">')[1].split("<")[0]
    assert _login_works(client, "nina", password)


def test_add_page_shows_errors_beside_the_fields(client, admin_user):
    client.force_login(admin_user)
    response = client.post(reverse("people:add"), {"username": "ADA", "email": "nope", "role": "root"})
    assert response.status_code == 400
    body = response.content.decode()
    assert "has-error" in body and "Enter a valid email address." in body
    assert User.objects.filter(username__iexact="ada").count() == 1


def test_detail_page_actions(client, admin_user, viewer):
    client.force_login(admin_user)
    detail = reverse("people:detail", kwargs={"username": "vera"})
    assert b"Change role" in client.get(detail).content
    response = client.post(reverse("people:role", kwargs={"username": "vera"}), {"role": "operator"}, follow=True)
    assert b"vera is now operator." in response.content and user_role(_fresh(viewer)) == "operator"
    response = client.post(reverse("people:active", kwargs={"username": "vera"}), {"active": "0"}, follow=True)
    assert b"deactivated" in response.content and not _fresh(viewer).is_active
    response = client.post(reverse("people:active", kwargs={"username": "vera"}), {"active": "maybe"}, follow=True)
    assert response.status_code == 200 and not _fresh(viewer).is_active
    response = client.post(reverse("people:password", kwargs={"username": "vera"}))
    assert response.status_code == 200 and b"one-time-password" in response.content
    assert "no-store" in response["Cache-Control"]


def test_detail_page_refusals_are_messages_not_errors(client, admin_user):
    client.force_login(admin_user)
    response = client.post(reverse("people:role", kwargs={"username": "ada"}), {"role": "viewer"}, follow=True)
    assert response.status_code == 200 and b"last active admin" in response.content
    response = client.post(reverse("people:role", kwargs={"username": "ada"}), {"role": "god"}, follow=True)
    assert response.status_code == 200 and b"Choose a role" in response.content
    assert user_role(_fresh(admin_user)) == "admin"
    assert client.get(reverse("people:detail", kwargs={"username": "nobody"})).status_code == 404
    assert client.post(reverse("people:unlock", kwargs={"username": "nobody"})).status_code == 404


def test_unlock_from_the_page(client, admin_user, viewer, settings):
    settings.AXES_FAILURE_LIMIT = 2
    for _ in range(2):
        client.post("/accounts/login/", {"username": "vera", "password": "wrong"})
    assert client.post("/accounts/login/", {"username": "vera", "password": "pw-vera"}).status_code == 429
    client.force_login(admin_user)
    detail = client.get(reverse("people:detail", kwargs={"username": "vera"})).content
    assert b"person-unlock" in detail
    response = client.post(reverse("people:unlock", kwargs={"username": "vera"}), follow=True)
    assert b"vera is unlocked" in response.content
    assert AuditEvent.objects.filter(action="person.unlock").count() == 1
    assert _login_works(client, "vera", "pw-vera")


def test_navigation_shows_people_to_admins_only(client, admin_user, operator):
    client.force_login(operator)
    assert b'href="/people/"' not in client.get(reverse("dashboard:index")).content
    client.force_login(admin_user)
    page = client.get(reverse("dashboard:index")).content
    assert b'href="/people/"' in page and b"Django admin" not in page  # admins by group are not superusers
