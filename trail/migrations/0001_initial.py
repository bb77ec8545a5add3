"""The operator trail moves out of the audits app into its own, below recovery. Only Django's state moves;
the tables keep their names, and the content types (so permissions and role grants) follow the models."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

from kernel.contenttypes import content_types_relabel


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('audits', '0010_operatoraction_history_team'),
        ('journals', '0006_turn_effective'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        # The tables already exist under their audits_ names: only Django's state moves.
        migrations.SeparateDatabaseAndState(
            state_operations=[
            migrations.CreateModel(
                name='TrailHead',
                fields=[
                    ('id', models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False)),
                    ('seq', models.BigIntegerField(default=0)),
                    ('digest', models.CharField(default='0000000000000000000000000000000000000000000000000000000000000000', max_length=64)),
                ],
                options={
                    'db_table': 'audits_trailhead',
                    'constraints': [models.CheckConstraint(condition=models.Q(('id', 1)), name='trailhead_single_row')],
                },
            ),
            migrations.CreateModel(
                name='OperatorAction',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('actor_name', models.CharField(max_length=150)),
                    ('kind', models.CharField(choices=[('turn_approve', 'turn approve'), ('turn_block', 'turn block'), ('turn_park', 'turn park'), ('evidence_record', 'evidence record'), ('api_token_create', 'api token create'), ('api_token_revoke', 'api token revoke'), ('finding_acknowledge', 'finding acknowledge'), ('finding_resolve', 'finding resolve'), ('turn_edit', 'turn edit'), ('retention_remove', 'retention remove'), ('run_export', 'run export'), ('package_upload', 'package upload'), ('package_requeue', 'package requeue'), ('webhook_create', 'webhook create'), ('webhook_change', 'webhook change'), ('webhook_delete', 'webhook delete'), ('delivery_resend', 'delivery resend'), ('schedule_create', 'schedule create'), ('schedule_change', 'schedule change'), ('schedule_delete', 'schedule delete'), ('user_create', 'user create'), ('user_change', 'user change'), ('user_delete', 'user delete'), ('role_create', 'role create'), ('role_change', 'role change'), ('role_delete', 'role delete'), ('journal_repair', 'journal repair'), ('trail_export', 'trail export'), ('effect_map_create', 'effect map create'), ('effect_map_update', 'effect map update'), ('effect_map_attach', 'effect map attach'), ('history_upload', 'history upload'), ('history_requeue', 'history requeue'), ('team_create', 'team create'), ('team_change', 'team change'), ('team_delete', 'team delete')], max_length=32)),
                    ('reason', models.TextField()),
                    ('before', models.JSONField(default=dict)),
                    ('after', models.JSONField(default=dict)),
                    ('created_at', models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                    ('via', models.CharField(choices=[('console', 'console'), ('api', 'api'), ('admin', 'admin'), ('cli', 'cli'), ('system', 'system')], default='system', max_length=16)),
                    ('seq', models.BigIntegerField(unique=True)),
                    ('prev_digest', models.CharField(max_length=64)),
                    ('digest', models.CharField(max_length=64)),
                    ('actor', models.ForeignKey(null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
                    ('run', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='operator_actions', to='journals.run')),
                    ('turn', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='operator_actions', to='journals.turn')),
                ],
                options={
                    'db_table': 'audits_operatoraction',
                    'ordering': ['-created_at', '-id'],
                    'indexes': [models.Index(fields=['kind', '-created_at'], name='operatoraction_kind_created')],
                    'constraints': [models.CheckConstraint(condition=models.Q(('kind__in', ('turn_approve', 'turn_block', 'turn_park', 'evidence_record', 'api_token_create', 'api_token_revoke', 'finding_acknowledge', 'finding_resolve', 'turn_edit', 'retention_remove', 'run_export', 'package_upload', 'package_requeue', 'webhook_create', 'webhook_change', 'webhook_delete', 'delivery_resend', 'schedule_create', 'schedule_change', 'schedule_delete', 'user_create', 'user_change', 'user_delete', 'role_create', 'role_change', 'role_delete', 'journal_repair', 'trail_export', 'effect_map_create', 'effect_map_update', 'effect_map_attach', 'history_upload', 'history_requeue', 'team_create', 'team_change', 'team_delete'))), name='operatoraction_kind_valid'), models.CheckConstraint(condition=models.Q(('via__in', ('console', 'api', 'admin', 'cli', 'system'))), name='operatoraction_via_valid'), models.CheckConstraint(condition=models.Q(('seq__gte', 1)), name='operatoraction_seq_gte_1')],
                },
            ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(
            content_types_relabel("audits", "trail", ('operatoraction', 'trailhead')),
            content_types_relabel("trail", "audits", ('operatoraction', 'trailhead')),
        ),
    ]
