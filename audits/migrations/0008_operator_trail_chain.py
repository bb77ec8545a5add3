# The operator trail made tamper-evident: each OperatorAction carries its place in one chain (seq), the
# digest of the row before it and its own (trail/chain.py), and TrailHead (one row) holds the chain's
# end, which every writer locks. Rows written before this migration are chained here, in id order.
# Also: where each act came from (via), the new kinds of the complete trail, findings of no run
# (trail_broken), and the trail verification's beat schedule.

import django.db.models.deletion
from django.db import migrations, models
from django.utils import timezone

from kernel.appendonly import append_only_trigger_sql
from kernel.dialect import postgres_only

KINDS = (
    "turn_approve", "turn_block", "turn_park", "evidence_record", "api_token_create", "api_token_revoke",
    "finding_acknowledge", "finding_resolve", "turn_edit", "retention_remove", "run_export", "package_upload",
    "package_requeue", "webhook_create", "webhook_change", "webhook_delete", "delivery_resend", "schedule_create",
    "schedule_change", "schedule_delete", "user_create", "user_change", "user_delete", "role_create", "role_change",
    "role_delete", "journal_repair", "trail_export",
)
VIA = ("console", "api", "admin", "cli", "system")
GENESIS = "0" * 64
TRAIL_TABLE = "audits_operatoraction"
SCHEDULE = (
    "audit: trail verification",
    "audits.tasks.audit_trail_verification",
    900,
    "Re-verify the operator trail's digest chain; a break is a trail_broken finding.",
)


def chain_existing(apps, schema_editor):
    from trail.chain import row_digest  # the one digest formula, as the writer computes it

    OperatorAction = apps.get_model("audits", "OperatorAction")
    TrailHead = apps.get_model("audits", "TrailHead")
    seq, prev = 0, GENESIS
    for row in OperatorAction.objects.order_by("id").iterator(chunk_size=2000):
        seq += 1
        digest = row_digest(
            seq=seq, prev_digest=prev, actor_id=row.actor_id, actor_name=row.actor_name, kind=row.kind,
            run_id=row.run_id, turn_id=row.turn_id, reason=row.reason, before=row.before, after=row.after,
            created_at=row.created_at, via="system",
        )
        OperatorAction.objects.filter(pk=row.pk).update(seq=seq, prev_digest=prev, digest=digest, via="system")
        prev = digest
    TrailHead.objects.update_or_create(pk=1, defaults={"seq": seq, "digest": prev})


def create_schedule(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    name, task, seconds, description = SCHEDULE
    interval, _ = IntervalSchedule.objects.get_or_create(every=seconds, period="seconds")
    PeriodicTask.objects.get_or_create(
        name=name, defaults={"task": task, "interval": interval, "description": description, "enabled": True}
    )
    apps.get_model("django_celery_beat", "PeriodicTasks").objects.update_or_create(
        ident=1, defaults={"last_update": timezone.now()}
    )


def drop_schedule(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=SCHEDULE[0]).delete()


class Migration(migrations.Migration):

    dependencies = [
        ("audits", "0007_operatoraction_retention_remove"),
        ("journals", "0005_turn_run_statement_check"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [
        migrations.CreateModel(
            name="TrailHead",
            fields=[
                ("id", models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False)),
                ("seq", models.BigIntegerField(default=0)),
                ("digest", models.CharField(default=GENESIS, max_length=64)),
            ],
            options={"constraints": [models.CheckConstraint(condition=models.Q(("id", 1)), name="trailhead_single_row")]},
        ),
        migrations.AddField(
            model_name="operatoraction",
            name="via",
            field=models.CharField(choices=[(v, v) for v in VIA], default="system", max_length=16),
        ),
        migrations.AddField(model_name="operatoraction", name="seq", field=models.BigIntegerField(null=True)),
        migrations.AddField(
            model_name="operatoraction", name="prev_digest", field=models.CharField(default="", max_length=64),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="operatoraction", name="digest", field=models.CharField(default="", max_length=64),
            preserve_default=False,
        ),
        migrations.RemoveConstraint(model_name="operatoraction", name="operatoraction_kind_valid"),
        migrations.AlterField(
            model_name="operatoraction",
            name="kind",
            field=models.CharField(choices=[(k, k.replace("_", " ")) for k in KINDS], max_length=32),
        ),
        # The rows are append-only: only this migration, once, writes their chain columns, with the
        # trigger lifted around it.
        postgres_only(append_only_trigger_sql(TRAIL_TABLE)[1]),
        migrations.RunPython(chain_existing, migrations.RunPython.noop),
        postgres_only(append_only_trigger_sql(TRAIL_TABLE)[0]),
        migrations.AlterField(model_name="operatoraction", name="seq", field=models.BigIntegerField(unique=True)),
        migrations.AddConstraint(
            model_name="operatoraction",
            constraint=models.CheckConstraint(condition=models.Q(("kind__in", KINDS)), name="operatoraction_kind_valid"),
        ),
        migrations.AddConstraint(
            model_name="operatoraction",
            constraint=models.CheckConstraint(condition=models.Q(("via__in", VIA)), name="operatoraction_via_valid"),
        ),
        migrations.AddConstraint(
            model_name="operatoraction",
            constraint=models.CheckConstraint(condition=models.Q(("seq__gte", 1)), name="operatoraction_seq_gte_1"),
        ),
        migrations.AddIndex(
            model_name="operatoraction",
            index=models.Index(fields=["kind", "-created_at"], name="operatoraction_kind_created"),
        ),
        migrations.AlterField(
            model_name="finding",
            name="run",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT,
                                    related_name="findings", to="journals.run"),
        ),
        migrations.AlterField(
            model_name="finding",
            name="kind",
            field=models.CharField(
                choices=[("lost_turn", "lost turn"), ("chain_broken", "chain broken"),
                         ("storage_corruption", "storage corruption"), ("decision_changed", "decision changed"),
                         ("blocked_turn_unclaimed", "blocked turn unclaimed"),
                         ("assessment_missed", "assessment missed"), ("trail_broken", "trail broken")],
                max_length=32,
            ),
        ),
        migrations.RemoveConstraint(model_name="finding", name="finding_kind_valid"),
        migrations.AddConstraint(
            model_name="finding",
            constraint=models.CheckConstraint(
                condition=models.Q(("kind__in", ("lost_turn", "chain_broken", "storage_corruption",
                                                 "decision_changed", "blocked_turn_unclaimed", "assessment_missed",
                                                 "trail_broken"))),
                name="finding_kind_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="finding",
            constraint=models.UniqueConstraint(
                condition=models.Q(models.Q(("state", "resolved"), _negated=True), ("run__isnull", True)),
                fields=("kind", "subject", "fact_key"),
                name="finding_unique_unresolved_runless_fact",
            ),
        ),
        migrations.AddConstraint(
            model_name="finding",
            constraint=models.CheckConstraint(
                condition=models.Q(("run__isnull", False), ("kind", "trail_broken"), _connector="OR"),
                name="finding_run_required",
            ),
        ),
        migrations.RunPython(create_schedule, drop_schedule),
    ]
