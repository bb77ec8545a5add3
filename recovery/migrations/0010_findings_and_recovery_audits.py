"""Findings and recovery audits move from the audits app into recovery, whose gate reads them. Only Django's
state moves; the tables keep their names, and the content types follow the models."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

from kernel.contenttypes import content_types_relabel


class Migration(migrations.Migration):

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('audits', '0010_operatoraction_history_team'),
        ('journals', '0006_turn_effective'),
        ('recovery', '0009_turn_effective_backfill'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        # The tables already exist under their audits_ names: only Django's state moves.
        migrations.SeparateDatabaseAndState(
            state_operations=[
            migrations.CreateModel(
                name='Finding',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('kind', models.CharField(choices=[('lost_turn', 'lost turn'), ('chain_broken', 'chain broken'), ('storage_corruption', 'storage corruption'), ('decision_changed', 'decision changed'), ('blocked_turn_unclaimed', 'blocked turn unclaimed'), ('assessment_missed', 'assessment missed'), ('trail_broken', 'trail broken')], max_length=32)),
                    ('subject', models.CharField(blank=True, default='', max_length=200)),
                    ('fact_key', models.CharField(blank=True, default='', max_length=200)),
                    ('evidence', models.JSONField(default=dict)),
                    ('blocks_run', models.BooleanField(default=False)),
                    ('first_seen', models.DateTimeField(default=django.utils.timezone.now)),
                    ('last_seen', models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                    ('seen_count', models.BigIntegerField(default=1)),
                    ('state', models.CharField(choices=[('open', 'open'), ('acknowledged', 'acknowledged'), ('resolved', 'resolved')], default='open', max_length=16)),
                    ('acknowledged_at', models.DateTimeField(blank=True, null=True)),
                    ('acknowledge_reason', models.TextField(blank=True, default='')),
                    ('resolved_by_name', models.CharField(blank=True, default='', max_length=150)),
                    ('resolved_at', models.DateTimeField(blank=True, null=True)),
                    ('resolution_reason', models.TextField(blank=True, default='')),
                    ('acknowledged_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
                    ('resolved_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
                    ('run', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='findings', to='journals.run')),
                    ('turn', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='findings', to='journals.turn')),
                ],
                options={
                    'db_table': 'audits_finding',
                    'ordering': ['-last_seen', '-id'],
                },
            ),
            migrations.AlterField(
                model_name='journalcorruption',
                name='finding',
                field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='recovery.finding'),
            ),
            migrations.CreateModel(
                name='RecoveryAudit',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('fencing_token', models.BigIntegerField()),
                    ('worker_id', models.CharField(max_length=200)),
                    ('decision', models.CharField(max_length=16)),
                    ('resume_from', models.TextField(blank=True, null=True)),
                    ('progress_key', models.TextField()),
                    ('attempt', models.IntegerField()),
                    ('planned', models.JSONField(default=list)),
                    ('opened_at', models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                    ('assessment', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='recovery.assessment')),
                    ('claim', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='audits', to='recovery.turnclaim')),
                    ('run', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='recovery_audits', to='journals.run')),
                    ('turn', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='recovery_audits', to='journals.turn')),
                ],
                options={
                    'db_table': 'audits_recoveryaudit',
                    'ordering': ['-opened_at', '-id'],
                },
            ),
            migrations.CreateModel(
                name='RecoveryAuditAction',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('position', models.IntegerField()),
                    ('kind', models.CharField(choices=[('phase', 'phase'), ('intent', 'intent'), ('terminal', 'terminal')], max_length=16)),
                    ('target', models.CharField(max_length=200)),
                    ('detail', models.JSONField(default=dict)),
                    ('planned', models.BooleanField()),
                    ('reported_at', models.DateTimeField(default=django.utils.timezone.now)),
                    ('audit', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='actions', to='recovery.recoveryaudit')),
                ],
                options={
                    'db_table': 'audits_recoveryauditaction',
                    'ordering': ['audit', 'position'],
                },
            ),
            migrations.CreateModel(
                name='RecoveryAuditClosure',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('closed_at', models.DateTimeField(default=django.utils.timezone.now)),
                    ('note', models.TextField(blank=True, default='')),
                    ('divergence_count', models.IntegerField(default=0)),
                    ('audit', models.OneToOneField(on_delete=django.db.models.deletion.PROTECT, related_name='closure', to='recovery.recoveryaudit')),
                ],
                options={
                    'db_table': 'audits_recoveryauditclosure',
                    'ordering': ['-closed_at'],
                },
            ),
            migrations.CreateModel(
                name='RecoveryDivergence',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('code', models.CharField(choices=[('unplanned_action', 'unplanned action'), ('repeated_action', 'repeated action'), ('planned_action_missing', 'planned action missing')], max_length=32)),
                    ('kind', models.CharField(max_length=16)),
                    ('target', models.CharField(max_length=200)),
                    ('detail', models.TextField()),
                    ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                    ('action', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='recovery.recoveryauditaction')),
                    ('audit', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='divergences', to='recovery.recoveryaudit')),
                ],
                options={
                    'db_table': 'audits_recoverydivergence',
                    'ordering': ['audit', 'id'],
                },
            ),
            migrations.AddIndex(
                model_name='finding',
                index=models.Index(fields=['state', '-last_seen'], name='finding_state_seen'),
            ),
            migrations.AddIndex(
                model_name='finding',
                index=models.Index(fields=['run', 'state'], name='finding_run_state'),
            ),
            migrations.AddIndex(
                model_name='finding',
                index=models.Index(fields=['kind', 'state'], name='finding_kind_state'),
            ),
            migrations.AddConstraint(
                model_name='finding',
                constraint=models.CheckConstraint(condition=models.Q(('kind__in', ('lost_turn', 'chain_broken', 'storage_corruption', 'decision_changed', 'blocked_turn_unclaimed', 'assessment_missed', 'trail_broken'))), name='finding_kind_valid'),
            ),
            migrations.AddConstraint(
                model_name='finding',
                constraint=models.CheckConstraint(condition=models.Q(('state__in', ('open', 'acknowledged', 'resolved'))), name='finding_state_valid'),
            ),
            migrations.AddConstraint(
                model_name='finding',
                constraint=models.CheckConstraint(condition=models.Q(models.Q(('resolved_at__isnull', False), ('state', 'resolved')), models.Q(models.Q(('state', 'resolved'), _negated=True), ('resolved_at__isnull', True)), _connector='OR'), name='finding_resolved_at_iff_resolved'),
            ),
            migrations.AddConstraint(
                model_name='finding',
                constraint=models.UniqueConstraint(condition=models.Q(('state', 'resolved'), _negated=True), fields=('kind', 'run', 'subject', 'fact_key'), name='finding_unique_unresolved_fact'),
            ),
            migrations.AddConstraint(
                model_name='finding',
                constraint=models.UniqueConstraint(condition=models.Q(models.Q(('state', 'resolved'), _negated=True), ('run__isnull', True)), fields=('kind', 'subject', 'fact_key'), name='finding_unique_unresolved_runless_fact'),
            ),
            migrations.AddConstraint(
                model_name='finding',
                constraint=models.CheckConstraint(condition=models.Q(('run__isnull', False), ('kind', 'trail_broken'), _connector='OR'), name='finding_run_required'),
            ),
            migrations.AddConstraint(
                model_name='recoveryaudit',
                constraint=models.CheckConstraint(condition=models.Q(('attempt__gte', 1)), name='recoveryaudit_attempt_gte_1'),
            ),
            migrations.AddConstraint(
                model_name='recoveryauditaction',
                constraint=models.UniqueConstraint(fields=('audit', 'position'), name='recoveryauditaction_unique_position'),
            ),
            migrations.AddConstraint(
                model_name='recoveryauditaction',
                constraint=models.CheckConstraint(condition=models.Q(('kind__in', ('phase', 'intent', 'terminal'))), name='recoveryauditaction_kind_valid'),
            ),
            migrations.AddConstraint(
                model_name='recoverydivergence',
                constraint=models.CheckConstraint(condition=models.Q(('code__in', ('unplanned_action', 'repeated_action', 'planned_action_missing'))), name='recoverydivergence_code_valid'),
            ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(
            content_types_relabel("audits", "recovery", ('finding', 'recoveryaudit', 'recoveryauditaction', 'recoveryauditclosure', 'recoverydivergence')),
            content_types_relabel("recovery", "audits", ('finding', 'recoveryaudit', 'recoveryauditaction', 'recoveryauditclosure', 'recoverydivergence')),
        ),
    ]
