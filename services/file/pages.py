"""Console pages of the file service: NFS exports, SMB shares, SMB users."""
from plane.pages import Action, Column, FormField, Page
from services.file.models import NfsExport, SmbShare, SmbUser
from services.storage.models import FileSystem


def filesystem_names() -> list[str]:
    return list(FileSystem.objects.values_list("name", flat=True))


def smb_user_names() -> list[str]:
    return list(SmbUser.objects.values_list("username", flat=True))


PAGES = [
    Page(slug="nfs-exports", title="NFS exports", group="File", api="/api/v1/nfs-exports/",
         lookup="id", queryset=lambda: NfsExport.objects.select_related("filesystem"),
         help="NFSv4.1/4.2 exports (NFS-Ganesha). Clients not listed are refused.",
         detail="/console/nfs-exports/",
         columns=[Column("pseudo", "Pseudo path"), Column("filesystem.name", "File system"),
                  Column("path", "Directory"), Column("clients", "Clients", "list"),
                  Column("state", "State", "state"), Column("error", "Error")],
         form=[FormField("filesystem", "File system", "select", choices=filesystem_names,
                         required=True),
               FormField("path", "Directory", help="Inside the file system; empty: its root."),
               FormField("pseudo", "Pseudo path", help="Default: /<file system>."),
               FormField("clients", "Clients", "lines", required=True,
                         help="One per line: ADDRESS|CIDR|* [rw|ro] "
                              "[root_squash|all_squash|no_root_squash] [anonuid=USER] "
                              "[anongid=GROUP]. Squashed clients write as the anonymous ids "
                              "(default nobody): give the file system to them, or name its "
                              "owner here.")],
         actions=[Action("Set clients", "/api/v1/nfs-exports/{key}/", method="PATCH",
                         fields=[FormField("clients", "Clients", "lines", required=True)])]),
    Page(slug="smb-shares", title="SMB shares", group="File", api="/api/v1/smb-shares/",
         queryset=lambda: SmbShare.objects.select_related("filesystem"),
         help="SMB3 shares (Samba). Snapshots show as Previous Versions.",
         columns=[Column("name", "Name"), Column("filesystem.name", "File system"),
                  Column("path", "Directory"), Column("read_only", "Read-only"),
                  Column("valid_users", "Valid users", "list"), Column("encrypt", "Encrypted"),
                  Column("state", "State", "state"), Column("error", "Error")],
         form=[FormField("name", "Name", required=True),
               FormField("filesystem", "File system", "select", choices=filesystem_names,
                         required=True),
               FormField("path", "Directory", help="Inside the file system; empty: its root."),
               FormField("read_only", "Read-only", "checkbox"),
               FormField("valid_users", "Valid users", "lines",
                         help="SMB user names, one per line; empty: every SMB user."),
               FormField("encrypt", "Require encryption", "checkbox"),
               FormField("grant_access", "Grant the valid users write access", "checkbox",
                         help="Adds them to the directory's POSIX ACL (and its default ACL, "
                              "for what they create); without it only its owner, group and "
                              "mode decide.")],
         actions=[Action("Set valid users", "/api/v1/smb-shares/{key}/", method="PATCH",
                         fields=[FormField("valid_users", "Valid users", "lines"),
                                 FormField("grant_access", "Grant them write access",
                                           "checkbox")])]),
    Page(slug="smb-users", title="SMB users", group="File", api="/api/v1/smb-users/",
         lookup="username", queryset=lambda: SmbUser.objects.all(),
         help="Each SMB user gets a Unix account (no home, no login shell) kept by Strata.",
         columns=[Column("username", "User"), Column("state", "State", "state"),
                  Column("error", "Error"), Column("created_at", "Created", "time")],
         form=[FormField("username", "User name", required=True),
               FormField("password", "Password", "password", required=True)],
         actions=[Action("Set password", "/api/v1/smb-users/{key}/", method="PATCH",
                         fields=[FormField("password", "New password", "password",
                                           required=True)])]),
]
